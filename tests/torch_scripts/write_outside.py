"""Saves a checkpoint outside its working directory (a shared folder every branch would see) and logs
inside it; only the first is reported."""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

shared = Path(sys.argv[1])
dist.init_process_group("gloo")
value = torch.ones(2)
dist.all_reduce(value)
if dist.get_rank() == 0:
    torch.save({"value": value}, str(shared / "model.pt"))
    with open(shared / "train.log", "a") as stream:
        stream.write("step 0\n")
Path("inside.log").write_text("private\n")
torch.save({"value": value}, "latest.pt")
dist.barrier()
