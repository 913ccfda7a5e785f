"""A torch.optim optimizer on the problem the JSON in argv[1] describes; prints the parameters.

The problem: "optimizer" (the name of a torch.optim class), "sparse" (whether the look-ups give
sparse gradients), "groups" (each {"params": [table, ...], "options": {keyword arguments}}, a
table being a list of rows), "targets" and "scales" (one table per parameter, in group order),
"rows" (patterns: each a list of row indices per parameter) and "steps". Step t minimises, over
the parameters p, the sum of (p[r] - target[r]) ** 2 * scale[r] for the rows r of pattern
t % len(rows), p[r] looked up with torch.nn.functional.embedding. Prints {"params": [table, ...]}
in group order.
"""
import json
import sys

import torch
import torch.nn.functional as F


def table(rows):
    return torch.tensor(rows, dtype=torch.float32)


problem = json.loads(sys.argv[1])
groups, flat = [], []
for g in problem["groups"]:
    params = [table(p).requires_grad_() for p in g["params"]]
    flat += params
    groups.append(dict(g["options"], params=params))
targets = [table(t) for t in problem["targets"]]
scales = [table(s) for s in problem["scales"]]
opt = getattr(torch.optim, problem["optimizer"])(groups)
for step in range(problem["steps"]):
    opt.zero_grad()
    pattern = problem["rows"][step % len(problem["rows"])]
    loss = torch.zeros(())
    for p, t, s, rows in zip(flat, targets, scales, pattern):
        index = torch.tensor(rows, dtype=torch.long)
        looked_up = F.embedding(index, p, sparse=problem["sparse"])
        loss = loss + ((looked_up - t[index]) ** 2 * s[index]).sum()
    loss.backward()
    opt.step()
print(json.dumps({"params": [p.detach().tolist() for p in flat]}))
