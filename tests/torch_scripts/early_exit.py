"""Rank 1 returns before the last all_reduce the others wait in: NCCL's behaviour is a hang."""

import torch
import torch.distributed as dist

dist.init_process_group("nccl")
value = torch.ones(4)
dist.all_reduce(value)
if dist.get_rank() != 1:
    dist.all_reduce(value)
