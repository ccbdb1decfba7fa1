"""A DDP-free script that keeps a background thread alive (a logger thread, a prefetcher): a fork
would copy only one thread, so rank checkpoints are refused and seeks re-execute from the start."""

import sys
import threading

import torch
import torch.distributed as dist

mode = sys.argv[1] if len(sys.argv) > 1 else "thread"
dist.init_process_group("gloo")
stop = threading.Event()
if mode == "thread":
    threading.Thread(target=stop.wait, daemon=True).start()
shared = torch.zeros(4).share_memory_() if mode == "shared" else None
value = torch.ones(4)
for _ in range(40):
    dist.all_reduce(value)
    value = value / dist.get_world_size()
stop.set()
dist.destroy_process_group()
