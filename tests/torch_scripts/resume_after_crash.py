"""Checkpoints every step to a folder; rank 1 dies at step 3 of the first attempt; a restart resumes."""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

folder = Path(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
checkpoint = folder / "latest.pt"
state = torch.load(checkpoint) if checkpoint.exists() else {"step": 0, "value": torch.zeros(1)}
for step in range(state["step"], 6):
    value = state["value"] + step
    dist.all_reduce(value)
    state = {"step": step + 1, "value": value}
    if rank == 0:
        torch.save(state, checkpoint)
    dist.barrier()
    if step == 3 and rank == 1 and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        os._exit(3)
print(
    f"rank {rank} finished at step {state['step']} after {os.environ['TORCHELASTIC_RESTART_COUNT']} restarts"
)
