"""Each step a rank writes what its all_reduce returned to its own file and reads it back after a barrier.

Two live executions of this script in one working directory (a divergence search steps two branches side
by side, both resumed from one checkpoint) would read each other's file once their results differ: the
rank raises then. Each execution has its own private directory, so each reads back what it wrote.
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 6
dist.init_process_group("gloo")
rank = dist.get_rank()
mine = Path(f"result_rank{rank}.txt")
for step in range(steps):
    value = torch.randn(4)  # seeded by the simulator per (seed, rank)
    dist.all_reduce(value)
    written = f"step {step}: {value.tolist()}\n"
    mine.write_text(written)
    dist.barrier()
    found = mine.read_text()
    if found != written:
        raise RuntimeError(f"{mine} changed under r{rank}: {found!r} where it wrote {written!r}")
