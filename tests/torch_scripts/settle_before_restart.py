"""A rank killed while others hold a collective's result the World has not yet delivered in logical time.

r0 and r1 all_reduce a large tensor (long on the fabric); its result goes to their processes at once,
but their polls come at its logical completion. r2 is killed by a crash fault in between, and the
restart kills r0 and r1 — while r1, in wall time, is still writing a file after the all_reduce. The
restarted ranks must find that file whatever the machine's speed: before a restart, the surviving ranks
run to their next wait on the World (torch/elastic.py).
"""

import os
import select
import time
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
pair = dist.new_group([0, 1])
marker = Path("marker.txt")
if os.environ["TORCHELASTIC_RESTART_COUNT"] != "0":
    if not marker.exists():
        raise RuntimeError("the file r1 wrote after its last collective before the crash is missing")
    dist.barrier()
elif rank in (0, 1):
    dist.all_reduce(torch.ones(8_000_000), group=pair)
    if rank == 1:
        select.select([], [], [], 0.5)  # wall time, not logical time: the race a restart must not lose
        marker.write_text("written before the restart\n")
    dist.barrier()
else:
    time.sleep(float(os.environ.get("SETTLE_SLEEP", "0.00005")))  # logical: r2 enters inside the window
    print(f"r2 enters the barrier at {time.perf_counter_ns()}")
    dist.barrier()
