"""Bench workload for ``timetravel bench torch``: N small all_reduces (a script, never imported)."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.ones(1)
for _ in range(int(sys.argv[1])):
    value.fill_(1.0)  # 4**200 would overflow into the NaN detector
    dist.all_reduce(value)
dist.destroy_process_group()
