"""Rank 0 feeds a NaN into an all_reduce that rank 1 never enters (it returns first): the collective
never completes, and the failure is still the nan (not the hang it would also be)."""

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.ones(4)
dist.all_reduce(value)
if dist.get_rank() == 0:
    value[1] = float("nan")
    dist.all_reduce(value)
