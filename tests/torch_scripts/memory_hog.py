"""Rank 1 allocates 1 GiB after 1 GiB, as a script sized for GPUs would on one host, while rank 0
waits in a barrier. The arrays are never written (numpy.empty), so a run without a memory limit
reserves address space, not the host's memory: the test is safe on any machine. argv: the GiB to try
(default 64)."""

import sys

import numpy as np
import torch.distributed as dist

chunks = int(sys.argv[1]) if len(sys.argv) > 1 else 64
dist.init_process_group("gloo")
held = []
if dist.get_rank() == 1:
    for _ in range(chunks):
        held.append(np.empty(1 << 27))  # 1 GiB of float64
dist.barrier()
print("allocated", len(held), "GiB")
