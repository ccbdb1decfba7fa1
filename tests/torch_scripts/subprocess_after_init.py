"""A rank starts a subprocess after init_process_group, as `plain` (subprocess takes the vfork /
posix_spawn path: no copy of the rank's memory runs Python) or `preexec` (a preexec_fn forces a real
fork whose child runs Python before exec: the fork_after_init class of bug)."""

import subprocess
import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
if sys.argv[1] == "preexec":
    subprocess.run(["true"], check=True, preexec_fn=lambda: None)
else:
    subprocess.run(["true"], check=True)
value = torch.ones(1)
dist.all_reduce(value)
assert value.item() == dist.get_world_size()
