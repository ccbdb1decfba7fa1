"""A step of known work: per step x (8x16) @ w (16x32) forward, backward, then an all_reduce of w.grad.

Forward 2*8*16*32 = 8,192 flops; backward owes twice that: 24,576 flops a step under compute_model=flops.
The script prints how long each step took on its own clock (perf_counter_ns), as users time steps.
"""

import time

import torch
import torch.distributed as dist

STEPS = 3
dist.init_process_group("nccl")
x = torch.ones(8, 16)
w = torch.ones(16, 32, requires_grad=True)
for step in range(STEPS):
    started_ns = time.perf_counter_ns()
    (x @ w).sum().backward()
    dist.all_reduce(w.grad)
    w.grad = None
    print(f"step {step} took {time.perf_counter_ns() - started_ns} ns")
