"""DistributedDataParallel(module, device_ids=[local_rank]) as GPU scripts write it. argv[1]:
``placed`` — modules put on CUDA every way a script does (Module.to(index), .cuda(), device=, a
``with torch.device("cuda")`` block, meta then to_empty): each is taken, and trains; ``cpu`` — a
module never put on CUDA: torch refuses its device_ids (a ValueError on a GPU node as here)."""

import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl")
local_rank = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local_rank)
if sys.argv[1] == "cpu":
    DistributedDataParallel(torch.nn.Linear(2, 2), device_ids=[local_rank])
    raise SystemExit("DistributedDataParallel took a CPU module's device_ids")


def meta_then_to_empty() -> torch.nn.Module:
    with torch.device("meta"):
        module = torch.nn.Linear(2, 2)
    module.to_empty(device="cuda")
    module.reset_parameters()
    return module


def in_a_cuda_block() -> torch.nn.Module:
    with torch.device("cuda"):
        return torch.nn.Linear(2, 2)


placements = {
    "to(index)": lambda: torch.nn.Linear(2, 2).to(local_rank),
    "cuda()": lambda: torch.nn.Linear(2, 2).cuda(),
    "device=": lambda: torch.nn.Linear(2, 2, device=f"cuda:{local_rank}"),
    "with torch.device": in_a_cuda_block,
    "meta, to_empty": meta_then_to_empty,
}
for name, place in placements.items():
    model = DistributedDataParallel(place(), device_ids=[local_rank], output_device=local_rank)
    model(torch.ones(3, 2, device="cuda")).sum().backward()
    print(f"{name}: taken", flush=True)
