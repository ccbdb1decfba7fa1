"""A helper module that reads RANK at import time: per process under torchrun, so per rank here."""

import os

import torch
import torch.distributed as dist

RANK_AT_IMPORT = int(os.environ["RANK"])
dist.init_process_group("gloo")
value = torch.tensor([float(RANK_AT_IMPORT)])
dist.all_reduce(value)
print(f"sum {value.item()}")
