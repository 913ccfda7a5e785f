"""Python PyTorch side of bench_overhead: the same MLP step, hand-written, on CUDA device 0 when
there is one (as `trainer fit` picks), else on the CPU. Prints step times."""
import sys
import time

import torch

batches, batch_size, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
torch.manual_seed(1)
x = torch.randn(16384, 784)
y = torch.randint(0, 10, (16384,))
model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(), torch.nn.Linear(256, 128),
                            torch.nn.ReLU(), torch.nn.Linear(128, 10)).to(device)
opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
starts = []
per_epoch = 16384 // batch_size
perm = torch.randperm(16384)
for b in range(batches):
    starts.append(time.perf_counter())
    if b % per_epoch == 0:
        perm = torch.randperm(16384)
    idx = perm[(b % per_epoch) * batch_size:(b % per_epoch + 1) * batch_size]
    loss = torch.nn.functional.cross_entropy(model(x.index_select(0, idx).to(device)),
                                             y.index_select(0, idx).to(device))
    opt.zero_grad()
    loss.backward()
    opt.step()
for a, b in zip(starts[warmup:], starts[warmup + 1:]):
    print(b - a)
