"""``init_process_group(backend=argv[1])`` then one all_reduce: with CUDA served (the simulator's
default) nccl works; on a CPU-only host (real torch here, or ``--set cuda=off``) torch refuses it."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group(backend=sys.argv[1])
total = torch.ones(1)
dist.all_reduce(total)
print("backend", dist.get_backend(), "sum", total.item())
