"""Libraries built on torch that ask a tensor for its device, under the CUDA mapping (see :mod:`.cuda`).

A tensor the script put on ``cuda`` says ``cpu`` here. Accelerate's debug mode (``state.debug``,
``ACCELERATE_DEBUG_MODE``) checks, before each of its collectives, that the data is on the device
its state is configured for, then gathers the shapes of every rank and raises its own
``DistributedOperationException`` on a mismatch. Its device check would read every tensor as off the
device (and, for a dict, trip over its own message with an ``AttributeError``), so the shape check a
user relies on would never run. Patched when the script imports accelerate (timetravel does not depend
on it): its ``find_device`` answers the current CUDA device for a CPU tensor while accelerate's state
is on CUDA. A tensor left on the CPU by mistake passes that check here (every tensor is a CPU one).
"""

from __future__ import annotations

from typing import Any

from timetravel.torch.rank.env.cuda_api import SimulatedCuda
from timetravel.torch.rank.env.patching import Patches, when_imported
from timetravel.torch.rank.errors import passes_through

ACCELERATE_OPERATIONS = "accelerate.utils.operations"


def patch_libraries(patches: Patches, cuda: SimulatedCuda) -> None:
    when_imported(patches, ACCELERATE_OPERATIONS, lambda module: _patch_accelerate(patches, cuda, module))


def _patch_accelerate(patches: Patches, cuda: SimulatedCuda, operations: Any) -> None:
    import torch

    def wrap(original: Any) -> Any:
        @passes_through
        def find_device(data: Any) -> Any:
            device = original(data)
            if device is None or device.type != "cpu" or not _accelerate_on_cuda():
                return device
            return torch.device("cuda", cuda.current_index)

        return find_device

    patches.wrap(operations, "find_device", wrap)


def _accelerate_on_cuda() -> bool:
    """Whether accelerate's shared state is set up, on a CUDA device (never sets it up itself)."""
    from accelerate.state import PartialState

    if not PartialState._shared_state:
        return False
    return bool(PartialState().device.type == "cuda")
