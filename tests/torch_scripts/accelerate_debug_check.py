"""Accelerate's debug mode on a simulated GPU node: before each of its collectives it checks the data
is on its device, then gathers every rank's shapes and raises its own DistributedOperationException
when they differ. Each operation runs with shapes that agree (it must pass) and that differ (it must
raise accelerate's exception, not an AttributeError)."""

import torch
from accelerate import PartialState
from accelerate.utils.operations import (
    DistributedOperationException,
    broadcast,
    gather,
    pad_across_processes,
    reduce,
)

state = PartialState()
assert state.device.type == "cuda", state.device
state.debug = True
operations = {
    "gather": gather,
    "pad_across_processes": lambda data: pad_across_processes(data, dim=0),
    "reduce": reduce,
    "broadcast": broadcast,
}
for name, operation in operations.items():
    operation({"tensor": torch.ones(2, 5).to(state.device)})  # the same shape everywhere: passes
    shape = (1, 5) if state.process_index == 0 else (1, 2, 5)
    try:
        operation({"tensor": torch.ones(shape).to(state.device)})
    except DistributedOperationException as error:
        print(f"{name}: DistributedOperationException {str(error).splitlines()[0]}", flush=True)
    else:
        print(f"{name}: no exception", flush=True)
state.destroy_process_group()
