"""Rank 1 reaches the all_reduce ``LATE`` seconds after rank 0 (argv[2]); the group was made with
``timeout=TIMEOUT`` seconds (argv[1], ``none`` for torch's default). Real torch raises in rank 0's wait
once TIMEOUT has passed; the simulator reports the hang at that moment, with that number."""

import datetime
import sys
import time

import torch
import torch.distributed as dist

timeout = None if sys.argv[1] == "none" else datetime.timedelta(seconds=float(sys.argv[1]))
late_s = float(sys.argv[2])
if timeout is None:
    dist.init_process_group(backend="gloo")
else:
    dist.init_process_group(backend="gloo", timeout=timeout)
if dist.get_rank() == 1:
    time.sleep(late_s)
value = torch.ones(4)
dist.all_reduce(value)
print(f"rank {dist.get_rank()} all_reduce {value.tolist()}", flush=True)
