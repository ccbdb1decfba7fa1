"""A rank forks after init_process_group (a DataLoader-style worker): it works, with a warning."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
child = os.fork()
if child == 0:
    print("the forked child must not speak on the rank's channel")
    os._exit(0)
os.waitpid(child, 0)
value = torch.ones(1)
dist.all_reduce(value)
assert value.item() == dist.get_world_size()
