"""``torch.accelerator`` agreeing with the simulated ``torch.cuda`` (see :mod:`.cuda` for the whole story).

Scripts written for torch >= 2.6 ask ``torch.accelerator`` rather than ``torch.cuda``: with CUDA mapped,
it answers what a GPU node's does — available, ``device_count()`` the local world size,
``current_accelerator()`` ``cuda``, the current device index and stream of the simulated runtime, the
memory counters at 0, ``Graph`` refused. Each is its own function (torch.compile keys its handlers by
function: one shared with ``torch.cuda`` is registered twice). torch's C++ asks the C++ accelerator,
which stays the CPU: ``torch._C._get_accelerator()`` and what calls it (docs/torch.md lists them).
"""

from __future__ import annotations

from typing import Any

from timetravel.torch.rank.env import cuda_api
from timetravel.torch.rank.env.cuda_api import SimulatedCuda
from timetravel.torch.rank.env.patching import Patches

ZERO_COUNTERS = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved")
HOUSEKEEPING = (
    "empty_cache",
    "empty_host_cache",
    "reset_accumulated_memory_stats",
    "reset_peak_memory_stats",
)


def patch_accelerator(patches: Patches, cuda: SimulatedCuda) -> None:
    """Replace the ``torch.accelerator`` functions (module docstring)."""
    import torch.accelerator
    from typing_extensions import deprecated

    accelerator = torch.accelerator
    served = _accelerator_functions(cuda)
    replacements: dict[str, Any] = {
        "is_available": served["is_available"],
        "device_count": served["device_count"],
        "current_accelerator": served["current_accelerator"],
        "current_device_index": served["current_device_index"],
        "current_device_idx": deprecated("Use `current_device_index` instead.", category=FutureWarning)(
            served["current_device_index"]
        ),
        "set_device_index": served["set_device_index"],
        "set_device_idx": deprecated("Use `set_device_index` instead.", category=FutureWarning)(
            served["set_device_index"]
        ),
        "current_stream": served["current_stream"],
        "set_stream": served["set_stream"],
        "synchronize": served["synchronize"],
        "get_device_capability": served["get_device_capability"],
        "device_index": _device_index_class(cuda),
        "memory_stats": served["memory_stats"],
        "get_memory_info": served["get_memory_info"],
        "Graph": cuda_api.refused("Graph", True, "torch.accelerator"),
    }
    for name in ZERO_COUNTERS:
        replacements[name] = _zero(name)
    for name in HOUSEKEEPING:
        replacements[name] = _nothing(name)
    for name, value in replacements.items():
        if hasattr(accelerator, name):
            patches.replace(accelerator, name, value, aliases=False)


def _accelerator_functions(cuda: SimulatedCuda) -> dict[str, Any]:
    """The ``torch.accelerator`` functions answered by ``cuda``, by name."""
    import torch
    from torch.accelerator._utils import _get_device_index

    def is_available() -> bool:
        return cuda.is_available()

    def device_count() -> int:
        return cuda.device_count()

    def current_accelerator(check_available: bool = False) -> Any:
        return torch.device("cuda")

    def current_device_index() -> int:
        return cuda.current_device()

    def set_device_index(device: Any, /) -> None:
        cuda.set_device(_get_device_index(device, optional=False))

    def current_stream(device: Any = None, /) -> Any:
        return cuda.current_stream(_get_device_index(device, optional=True))

    def set_stream(stream: Any) -> None:
        cuda.set_stream(stream)

    def synchronize(device: Any = None, /) -> None:
        cuda.synchronize(_get_device_index(device, optional=True))

    def get_device_capability(device: Any = None, /) -> dict[str, Any]:
        cuda.index(_get_device_index(device, optional=True))
        return {"supported_dtypes": supported_dtypes(torch)}

    def memory_stats(device_index: Any = None, /) -> Any:
        return cuda_api.memory_stats(_get_device_index(device_index, optional=True))

    def get_memory_info(device_index: Any = None, /) -> tuple[int, int]:
        return cuda.mem_get_info(_get_device_index(device_index, optional=True))

    return {
        "is_available": is_available,
        "device_count": device_count,
        "current_accelerator": current_accelerator,
        "current_device_index": current_device_index,
        "set_device_index": set_device_index,
        "current_stream": current_stream,
        "set_stream": set_stream,
        "synchronize": synchronize,
        "get_device_capability": get_device_capability,
        "memory_stats": memory_stats,
        "get_memory_info": get_memory_info,
    }


def _device_index_class(cuda: SimulatedCuda) -> type:
    """``torch.accelerator.device_index`` over ``cuda``'s current device."""

    class device_index:
        """``with torch.accelerator.device_index(i):`` makes ``i`` the current device for the block."""

        def __init__(self, device: int | None, /) -> None:
            self.idx = device
            self.prev_idx = -1

        def __enter__(self) -> None:
            if self.idx is not None:
                self.prev_idx = cuda.current_index
                cuda.set_device(self.idx)

        def __exit__(self, *exc_info: object) -> None:
            if self.idx is not None:
                cuda.current_index = self.prev_idx

    return device_index


def supported_dtypes(torch: Any) -> set[Any]:
    """What ``get_device_capability`` reports a CUDA device supports (every dtype the CPU serves)."""
    return {
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    }


def _zero(name: str) -> Any:
    def counter(device_index: Any = None, /) -> int:
        return 0

    counter.__name__ = name
    return counter


def _nothing(name: str) -> Any:
    def housekeeping(device_index: Any = None, /) -> None:
        return None

    housekeeping.__name__ = name
    return housekeeping
