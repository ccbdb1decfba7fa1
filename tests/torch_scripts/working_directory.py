"""Checks what a rank sees of its working directory: private, empty, and TIMETRAVEL_LAUNCH_DIR set."""

import os
import sys

import torch.distributed as dist

dist.init_process_group("gloo")
launched_from = sys.argv[1]
assert os.environ["TIMETRAVEL_LAUNCH_DIR"] == launched_from, (
    os.environ["TIMETRAVEL_LAUNCH_DIR"],
    launched_from,
)
assert os.getcwd() != launched_from and os.path.basename(os.getcwd()) == "work", os.getcwd()
assert os.environ["PWD"] == os.getcwd()
dist.barrier()
assert sorted(os.listdir(".")) in ([], ["rank0.txt"], ["rank1.txt"], ["rank0.txt", "rank1.txt"])
with open(f"rank{dist.get_rank()}.txt", "w") as stream:  # ranks of one run share the directory
    stream.write("here")
dist.barrier()
assert sorted(os.listdir(".")) == ["rank0.txt", "rank1.txt"], os.listdir(".")
