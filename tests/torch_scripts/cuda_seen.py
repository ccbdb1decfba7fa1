"""Asserts what torch.cuda says inside a rank: ``cuda_seen.py on`` (the simulator's CUDA on CPU, one
device per local rank) or ``cuda_seen.py off`` (nothing mapped: torch as a CPU-only host has it)."""

import sys

import torch
import torch.distributed as dist

mapped = sys.argv[1] == "on"
assert torch.cuda.is_available() is mapped, torch.cuda.is_available()
assert torch.cuda.device_count() == (2 if mapped else 0), torch.cuda.device_count()
dist.init_process_group("nccl" if mapped else "gloo")
total = torch.ones(1)
dist.all_reduce(total)
assert total.item() == 2.0
print("cuda", "on" if mapped else "off", "as expected")
