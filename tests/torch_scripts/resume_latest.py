"""Trains a few steps, saving ``latest.pt`` in its working directory each step; resumes from it if present.

Run twice in one shared directory, the second run would resume from the first run's last step (and do no
work): under the simulator each execution has its own private working directory, so both runs are the same.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 4
dist.init_process_group("gloo")
rank = dist.get_rank()
latest = Path("latest.pt")
state = torch.load(latest) if latest.exists() else {"step": 0, "weight": torch.zeros(3)}
print(f"rank {rank} starts at step {state['step']}")
weight = state["weight"]
for step in range(state["step"], steps):
    gradient = torch.randn(3)  # seeded by the simulator per (seed, rank)
    dist.all_reduce(gradient, op=dist.ReduceOp.AVG)
    weight = weight - 0.1 * gradient
    if rank == 0:
        torch.save({"step": step + 1, "weight": weight}, "latest.pt")
    dist.barrier()
Path(f"log_rank{rank}.txt").write_text(f"finished at step {steps}: {weight.tolist()}\n")
