"""A simulator bug planted from outside: the backend's result decoding is replaced by one that breaks
inside timetravel's own code. The run must fail as ``internal`` (timetravel's error, its traceback,
a request to report it), never as "r0 raised ..." against this script."""

import functools

import torch
import torch.distributed as dist

from timetravel.torch.rank import backend

dist.init_process_group("gloo")
backend.wire_to_tensor = functools.partial(backend.tensor_to_wire)  # a dict is no tensor: AttributeError
dist.all_reduce(torch.ones(4))
