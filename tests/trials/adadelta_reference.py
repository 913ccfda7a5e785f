"""torch.optim.Adadelta on the problem described by the JSON in argv[1]; prints the parameters.

The problem: parameter groups, each {"params": [[floats], ...], "lr", "rho", "eps",
"weight_decay"}; a step minimises sum over all parameters of (p - target) ** 2 * scale, where
"targets" and "scales" hold one list per parameter in group order; "steps" steps are taken. Prints
{"params": [[floats], ...]} in the same order.
"""
import json
import sys

import torch

problem = json.loads(sys.argv[1])
groups, flat = [], []
for g in problem["groups"]:
    params = [torch.tensor(p, dtype=torch.float32, requires_grad=True) for p in g["params"]]
    flat += params
    groups.append({"params": params, "lr": g["lr"], "rho": g["rho"], "eps": g["eps"],
                   "weight_decay": g["weight_decay"]})
targets = [torch.tensor(t, dtype=torch.float32) for t in problem["targets"]]
scales = [torch.tensor(s, dtype=torch.float32) for s in problem["scales"]]
opt = torch.optim.Adadelta(groups)
for _ in range(problem["steps"]):
    opt.zero_grad()
    loss = sum(((p - t) ** 2 * s).sum() for p, t, s in zip(flat, targets, scales))
    loss.backward()
    opt.step()
print(json.dumps({"params": [p.detach().tolist() for p in flat]}))
