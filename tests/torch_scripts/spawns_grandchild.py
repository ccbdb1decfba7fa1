"""Rank 0 starts a process of its own (``sleep``: a grandchild of the run, holding the rank's stdout)
and every rank trains on; the run must end it. argv: the number of steps (default 300)."""

import subprocess
import sys

import torch
import torch.distributed as dist

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 300
dist.init_process_group("gloo")
if dist.get_rank() == 0:
    child = subprocess.Popen(["sleep", "300"])
    print(f"grandchild {child.pid}", flush=True)
value = torch.ones(4)
for _ in range(steps):
    dist.all_reduce(value)
    value = value / dist.get_world_size()
