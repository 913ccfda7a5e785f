"""Python side of bench_optim: torch.optim.SparseAdam stepping a ROWS x DIM table whose gradient
holds LOOKUPS random rows (repeats included, uncoalesced, as a sparse Embedding's backward makes
it), a pool of 4 such gradients taken in turn. Prints the mean seconds of one of STEPS steps
after WARMUP untimed ones.

    sparse_adam_pytorch.py ROWS DIM LOOKUPS STEPS WARMUP
"""
import sys
import time

import torch

rows, dim, lookups, steps, warmup = (int(a) for a in sys.argv[1:6])
torch.manual_seed(1)
table = torch.nn.Parameter(torch.randn(rows, dim))
pool = [torch.sparse_coo_tensor(torch.randint(0, rows, (1, lookups)), torch.randn(lookups, dim),
                                (rows, dim)) for _ in range(4)]
opt = torch.optim.SparseAdam([table], lr=1e-3)
with torch.no_grad():
    for step in range(warmup + steps):
        if step == warmup:
            start = time.perf_counter()
        table.grad = pool[step % len(pool)]
        opt.step()
print((time.perf_counter() - start) / steps)
