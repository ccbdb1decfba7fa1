"""A rank's pid reaches its collectives (as a file name, a seed or a log line would reach its results):
the run must not depend on the host's pids. Also: the logical pid still names this process."""

import os

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
pid = os.getpid()
os.kill(pid, 0)  # signals this very process
child = os.fork()
if child == 0:  # a child sees its own pid, and the rank's as its parent
    os._exit(0 if os.getppid() == pid and os.getpid() != pid else 3)
_, status = os.waitpid(child, 0)
assert os.waitstatus_to_exitcode(status) == 0, "the forked child saw another parent"
try:
    import psutil
except ImportError:
    psutil = None
if psutil is not None:
    assert psutil.Process().memory_info().rss > 0
    assert psutil.Process(pid).memory_info().rss > 0
value = torch.tensor([float(pid), float(os.getppid())])
dist.all_reduce(value)
print("pids", pid, os.getppid(), value.tolist())
