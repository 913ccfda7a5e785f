"""Python side of bench_ddp: a bench model under torch.nn.parallel.DistributedDataParallel (Gloo).

    ddp_pytorch.py BATCHES PER_RANK WARMUP [mlp|embedding]

mlp (the default): bench_model.h's MLP, SGD with momentum. embedding: its EmbeddingNet (an
EmbeddingBag of 262144 x 64 with sparse gradients, mean of 16 lookups, then a linear layer),
plain SGD. Run one process per rank with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set. Each
rank trains on its slice of every global batch (the same split Crucible makes); rank 0 prints its
step times, one per line.
"""
import os
import sys
import time

import torch
import torch.distributed as dist

batches, per_rank, warmup = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
workload = sys.argv[4] if len(sys.argv) > 4 else "mlp"
# Builds without libuv (Debian 13's python3-torch 2.6) cannot serve the default TCPStore.
os.environ.setdefault("USE_LIBUV", "0")
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(1)
if workload == "mlp":
    x = torch.randn(16384, 784)
    y = torch.randint(0, 10, (16384,))
    model = torch.nn.Sequential(torch.nn.Linear(784, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
else:
    x = torch.randint(0, 262144, (16384, 16))
    y = torch.randint(0, 10, (16384,))
    model = torch.nn.Sequential(torch.nn.EmbeddingBag(262144, 64, mode="mean", sparse=True),
                                torch.nn.Linear(64, 10))
ddp = torch.nn.parallel.DistributedDataParallel(model)
if workload == "mlp":
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
else:
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
global_batch = per_rank * world
per_epoch = 16384 // global_batch
starts = []
for b in range(batches):
    starts.append(time.perf_counter())
    if b % per_epoch == 0:
        perm = torch.randperm(16384)
    first = (b % per_epoch) * global_batch + rank * per_rank
    idx = perm[first:first + per_rank]
    loss = torch.nn.functional.cross_entropy(ddp(x.index_select(0, idx)), y.index_select(0, idx))
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
if rank == 0:
    for a, b in zip(starts[warmup:], starts[warmup + 1:]):
        print(b - a)
