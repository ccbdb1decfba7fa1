"""Joins the group, then sleeps for ``argv[1]`` seconds of wall time (real torchrun) or logical time."""

import sys
import time

import torch.distributed as dist

dist.init_process_group("gloo")
time.sleep(float(sys.argv[1]))
