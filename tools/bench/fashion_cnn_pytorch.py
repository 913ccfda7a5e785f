"""The Fashion-MNIST CNN job of bench_gpu in Python: a plain PyTorch loop, or with --lightning the
same model in a Lightning module. Network, optimiser, learning-rate decay, batch size, seed and
data are those bench_gpu passes from configs/fashion_mnist_cnn.yaml, as in its hand-written
LibTorch loop. Runs on the first GPU when there is one. Exits 3 when --lightning is asked and no
Lightning is installed. Prints "RESULT <training steps> <test accuracy>"."""
import argparse
import gzip
import sys

import numpy as np
import torch
import torch.nn.functional as F

MEAN, STD = 0.2860, 0.3530  # of the training images in [0, 1], as trials/fashion_mnist/idx.cpp


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.from_numpy(np.frombuffer(data, np.uint8, offset=4 + 4 * dims).reshape(shape).copy())


def load_split(folder, split):
    images = read_idx(f"{folder}/{split}-images-idx3-ubyte.gz")
    labels = read_idx(f"{folder}/{split}-labels-idx1-ubyte.gz")
    x = ((images.float() / 255.0 - MEAN) / STD).unsqueeze(1).contiguous()
    return x, labels.long()


class CNN(torch.nn.Module):
    """trials/fashion_mnist/networks.h's CNN."""

    def __init__(self, a):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(1, a.filters1, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(a.filters1, a.filters2, 3, padding=1)
        self.fc = torch.nn.Linear(a.filters2 * 7 * 7, a.hidden)
        self.out = torch.nn.Linear(a.hidden, 10)
        self.dropout = torch.nn.Dropout(a.dropout)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        x = self.dropout(F.relu(self.fc(x.flatten(1))))
        return self.out(x)


def accuracy(model, x, y, device):
    model.eval()
    correct = 0
    with torch.no_grad():
        for start in range(0, len(x), 1000):
            logits = model(x[start:start + 1000].to(device))
            correct += (logits.argmax(1) == y[start:start + 1000].to(device)).sum().item()
    model.train()
    return correct / len(x)


def plain_loop(a, device, train, test):
    x, y = train
    model = CNN(a).to(device)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    sched = torch.optim.lr_scheduler.StepLR(opt, 1, a.lr_decay)
    steps, acc = 0, 0.0
    for _ in range(a.epochs):
        perm = torch.randperm(len(x))
        for start in range(0, len(x), a.batch):
            idx = perm[start:start + a.batch]
            loss = F.cross_entropy(model(x.index_select(0, idx).to(device)),
                                   y.index_select(0, idx).to(device))
            opt.zero_grad()
            loss.backward()
            opt.step()
            steps += 1
        sched.step()
        acc = accuracy(model, *test, device)
    return steps, acc


def lightning_loop(a, device, train, test):
    try:
        import lightning as L
    except ImportError:
        try:
            import pytorch_lightning as L
        except ImportError:
            sys.exit(3)

    class Module(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.net = CNN(a)

        def training_step(self, batch, _):
            x, y = batch
            return F.cross_entropy(self.net(x), y)

        def validation_step(self, batch, _):
            x, y = batch
            self.log("accuracy", (self.net(x).argmax(1) == y).float().mean())

        def configure_optimizers(self):
            opt = torch.optim.Adam(self.parameters(), lr=a.lr)
            return [opt], [torch.optim.lr_scheduler.StepLR(opt, 1, a.lr_decay)]

    # Whole batches indexed at once, as the plain loop does, rather than collated example by
    # example: the comparison is of the training loops, not of Python's per-example collation.
    data = torch.utils.data
    def batches(pair, size, shuffle):
        ds = data.TensorDataset(*pair)
        order = data.RandomSampler(ds) if shuffle else data.SequentialSampler(ds)
        return data.DataLoader(ds, sampler=data.BatchSampler(order, size, False), batch_size=None)

    loaders = [batches(train, a.batch, True), batches(test, 1000, False)]
    trainer = L.Trainer(max_epochs=a.epochs, accelerator="gpu" if device.type == "cuda" else "cpu",
                        devices=1, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0)
    module = Module()
    trainer.fit(module, *loaders)
    return trainer.global_step, accuracy(module.net.to(device), *test, device)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--lightning", action="store_true")
    p.add_argument("--data", required=True)
    for name, kind in [("epochs", int), ("batch", int), ("lr", float), ("lr-decay", float),
                       ("filters1", int), ("filters2", int), ("hidden", int),
                       ("dropout", float), ("seed", int)]:
        p.add_argument("--" + name, type=kind, required=True)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    train, test = load_split(a.data, "train"), load_split(a.data, "t10k")
    steps, acc = (lightning_loop if a.lightning else plain_loop)(a, device, train, test)
    print(f"RESULT {steps} {acc:.4f}")


if __name__ == "__main__":
    main()
