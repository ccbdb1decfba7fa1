"""FSDP2 + Adam, checkpointed with torch.distributed.checkpoint every 2 steps; resumes after a restart.

Each save goes to its own folder (``checkpoint/step_K``) and rank 0 then names it in ``latest.txt``, so a
crash halfway through a save never leaves a folder half old and half new. ``--forget-optimizer``: the
resume loads the model's shards but not Adam's state of them (a shard's optimizer state forgotten).
"""

import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from _script_common import sharded_mlp, train_step
from torch.distributed.checkpoint.state_dict import get_state_dict, set_model_state_dict, set_state_dict

STEPS = 8
forget = "--forget-optimizer" in sys.argv
dist.init_process_group("gloo")
rank = dist.get_rank()
model = sharded_mlp()
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
latest = Path("latest.txt")
start = 0
if latest.exists():
    model_state, optimizer_state = get_state_dict(model, optimizer)
    progress = torch.zeros((), dtype=torch.int64)
    state = {"model": model_state, "progress": progress}
    if not forget:
        state["optimizer"] = optimizer_state
    dcp.load(state, checkpoint_id=latest.read_text().strip())
    if forget:
        set_model_state_dict(model, state["model"])
    else:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    start = int(progress)
for step in range(start, STEPS):
    generator = torch.Generator().manual_seed(1000 * step + rank)  # the data position is the step
    train_step(model, optimizer, torch.randn(4, 8, generator=generator))
    print(f"step {step + 1} at {time.perf_counter_ns()} ns")
    if (step + 1) % 2 == 0:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        folder = f"checkpoint/step_{step + 1}"
        progress = torch.tensor(step + 1)
        dcp.save(
            {"model": model_state, "optimizer": optimizer_state, "progress": progress}, checkpoint_id=folder
        )
        dist.barrier()
        if rank == 0:
            latest.write_text(folder + "\n")
dist.destroy_process_group()
