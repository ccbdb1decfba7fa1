"""Bench workload for ``timetravel bench torch``: N small all_reduces (a script, never imported).

Rank 0 prints ``loop_wall_s <seconds>``, the loop's own time by ``time.perf_counter``: real seconds
under torchrun (what ``gloo_collective_us`` reads, without process start-up and the rendezvous,
whose noise swamped 200 calls when whole commands were subtracted), virtual ones under timetravel
(not read: the simulator's side is measured around whole in-process runs).
"""

import sys
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
value = torch.ones(1)
dist.barrier()
started = time.perf_counter()
for _ in range(int(sys.argv[1])):
    value.fill_(1.0)  # 4**200 would overflow into the NaN detector
    dist.all_reduce(value)
elapsed_s = time.perf_counter() - started
if dist.get_rank() == 0:
    print(f"loop_wall_s {elapsed_s:.6f}", flush=True)
dist.destroy_process_group()
