"""A determinism leak: a set of names decides the order of the all_reduces (hash order per process)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
values = {name: torch.tensor([float(len(name))]) for name in ("alpha", "be", "gamma1", "d")}
for name in {"alpha", "be", "gamma1", "d"}:  # set iteration: the order depends on PYTHONHASHSEED
    dist.all_reduce(values[name])
