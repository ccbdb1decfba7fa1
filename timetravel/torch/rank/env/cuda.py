"""CUDA on CPU inside a rank: a script written for GPUs runs unchanged on CPU tensors.

``install_cuda(local_rank, local_world_size, clock)``:

* ``torch.cuda``: ``is_available()`` is True, ``device_count()`` is the local world size,
  ``set_device``/``current_device``/``device(...)``, ``synchronize``, ``Stream``/``current_stream``/
  ``default_stream``/``stream(...)``/``set_stream``, ``Event(enable_timing=True)`` with
  ``elapsed_time`` in logical ms, ``manual_seed(_all)``/``seed``/``initial_seed``/``get_rng_state``/
  ``set_rng_state`` (kept per device; draws on "cuda" tensors come from the CPU generator), the
  memory counters (all 0; ``memory_stats()`` answers 0 for any key), ``get_device_name``/
  ``get_device_properties``/``get_device_capability``/``mem_get_info`` (a :class:`DeviceSpec`),
  ``nvtx`` ranges (no-ops) — :mod:`.cuda_api`;
* tensors and modules: every CUDA device a script names maps to the CPU (wrapped factory functions
  and tensor move methods, or a TorchFunctionMode when asked); autocast, GradScaler,
  ``torch.load``, DDP, DataParallel and DeviceMesh accept CUDA arguments — :mod:`.cuda_devices`;
* refused with ``unsupported: <name> needs a real GPU``: importing CUDA extension and Triton
  packages (:data:`REFUSED_MODULES`; an ``ImportError``, so a script's ``try: import flash_attn``
  fallback still works) and the torch.cuda features with no CPU meaning
  (:data:`~.cuda_api.REFUSED_CUDA_NAMES`: CUDA graphs, external streams, memory pools, allocators).

Call ``install_cuda`` on the rank's main thread before the script runs (a TorchFunctionMode, when
chosen, is pushed on that thread's stack only: torch keeps the stack per thread).
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Any

from timetravel.torch.rank.env import (
    cuda_accelerator,
    cuda_api,
    cuda_devices,
    cuda_libraries,
    cuda_placements,
)
from timetravel.torch.rank.env.clock import RankClock
from timetravel.torch.rank.env.cuda_api import DeviceSpec, SimulatedCuda, Unsupported
from timetravel.torch.rank.env.patching import Installation, Patches

REFUSED_MODULES = (
    "flash_attn",
    "flash_attn_2_cuda",
    "flash_attn_interface",
    "apex",
    "amp_C",
    "fused_layer_norm_cuda",
    "transformer_engine",
    "transformer_engine_torch",
    "triton",
    "xformers",
    "cupy",
    "pynvml",
)
"""Top-level packages that only work on a real GPU: importing one raises ``unsupported: <name> ...``."""

SIMULATED_FUNCTIONS = (
    "is_available",
    "device_count",
    "current_device",
    "set_device",
    "synchronize",
    "get_device_name",
    "get_device_capability",
    "get_device_properties",
    "get_arch_list",
    "mem_get_info",
    "current_stream",
    "default_stream",
    "set_stream",
    "stream",
    "manual_seed",
    "manual_seed_all",
    "initial_seed",
    "get_rng_state",
    "set_rng_state",
    "get_rng_state_all",
    "set_rng_state_all",
)


class RefusedImports:
    """A ``sys.meta_path`` finder refusing :data:`REFUSED_MODULES` by name.

    ``importlib.util.find_spec(name)`` (how torch probes for triton) answers None, as for a
    package that is not installed; an ``import`` raises ModuleNotFoundError with our message.
    """

    def __init__(self, names: tuple[str, ...]) -> None:
        self.names = frozenset(names)

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> Any:
        top = fullname.partition(".")[0]
        if top not in self.names:
            return None
        frame = sys._getframe(1)
        for _ in range(4):
            if frame is None:
                break
            if frame.f_code is importlib.util.find_spec.__code__:
                return None
            frame = frame.f_back  # type: ignore[assignment]
        refusal = ModuleNotFoundError(f"unsupported: {top} needs a real GPU", name=fullname)
        refusal.failure_kind = "unsupported"  # type: ignore[attr-defined]  # rank/errors.py reads it
        raise refusal

    def invalidate_caches(self) -> None:
        return None


def install_cuda(
    local_rank: int,
    local_world_size: int,
    clock: RankClock,
    *,
    spec: DeviceSpec | None = None,
    device_mapping: str = "patch",
    refused_modules: tuple[str, ...] = REFUSED_MODULES,
) -> Installation:
    """Serve the CUDA API on CPU for this rank (see the module docstring).

    ``device_mapping="patch"`` (the default) maps CUDA devices by wrapping torch's factory functions
    and the tensor move methods: a call that names no device costs nothing. ``"mode"`` pushes a
    TorchFunctionMode instead, which sees every torch call of the thread and costs a Python call on
    each (docs/torch.md has both figures).
    """
    import torch
    import torch.cuda
    import torch.cuda.nvtx

    cuda = SimulatedCuda(local_rank, local_world_size, clock, spec or DeviceSpec())
    cuda.manual_seed_all(torch.initial_seed())
    patches = Patches()
    cuda_api.activate(cuda)
    patches.on_undo(lambda: cuda_api.deactivate(cuda))
    _patch_cuda_api(patches, cuda)
    cuda_accelerator.patch_accelerator(patches, cuda)
    cuda_placements.patch_device_type(patches, cuda.placements)
    cuda_placements.patch_modules(patches, cuda.placements)
    cuda_devices.patch_generator(patches)
    cuda_devices.patch_amp(patches)
    cuda_devices.patch_load(patches)
    cuda_devices.patch_parallel(patches, cuda.placements)
    cuda_libraries.patch_libraries(patches, cuda)
    finder = RefusedImports(refused_modules)
    sys.meta_path.insert(0, finder)
    patches.on_undo(lambda: sys.meta_path.remove(finder))
    _map_devices(patches, cuda, device_mapping)
    patches.rebind_aliases(skip_prefixes=("timetravel.",))
    return Installation("cuda", patches, cuda)


def _patch_cuda_api(patches: Patches, cuda: SimulatedCuda) -> None:
    """torch.cuda's functions, classes and nvtx served by ``cuda`` (its submodules mirrored)."""
    import torch
    import torch.cuda
    import torch.cuda.nvtx

    for name in SIMULATED_FUNCTIONS:
        patches.replace(torch.cuda, name, getattr(cuda, name))
    patches.replace(torch.cuda, "seed", lambda: cuda.manual_seed(torch.initial_seed()))
    patches.replace(torch.cuda, "seed_all", lambda: cuda.manual_seed_all(torch.initial_seed()))
    patches.replace(torch.cuda, "is_initialized", lambda: True)
    patches.replace(torch.cuda, "_is_in_bad_fork", lambda: False)
    patches.replace(torch.cuda, "is_bf16_supported", lambda including_emulation=True: True)
    patches.replace(torch.cuda, "is_tf32_supported", lambda: True)
    patches.replace(torch.cuda, "memory_stats", cuda_api.memory_stats)
    patches.replace(torch.cuda, "memory_stats_as_nested_dict", lambda device=None: {})
    patches.replace(torch.cuda, "memory_snapshot", lambda *args, **kwargs: [])
    patches.replace(
        torch.cuda, "memory_summary", lambda *args, **kwargs: "simulated GPU: no memory is used\n"
    )
    patches.replace(torch.cuda, "list_gpu_processes", lambda *args, **kwargs: "simulated GPU: no processes\n")
    patches.replace(torch.cuda, "get_per_process_memory_fraction", lambda device=None: 1.0)
    for name in cuda_api.ZERO_FUNCTIONS:
        patches.replace(torch.cuda, name, cuda_api.zero)
    for name in cuda_api.NOTHING_FUNCTIONS:
        patches.replace(torch.cuda, name, cuda_api.nothing)
    for name in cuda_api.REFUSED_CUDA_NAMES:
        if hasattr(torch.cuda, name):
            patches.replace(
                torch.cuda, name, cuda_api.refused(name, isinstance(getattr(torch.cuda, name), type))
            )
    patches.replace(torch.cuda, "Stream", cuda_api.Stream)
    patches.replace(torch.cuda, "Event", cuda_api.Event)
    patches.replace(torch.cuda, "device", _device_context(cuda))
    patches.replace(torch.cuda, "device_of", _device_of_context(cuda))
    for name in ("range_push", "range_pop", "mark", "range_start", "range_end"):
        patches.replace(torch.cuda.nvtx, name, cuda_api.nothing)
    patches.replace(torch.cuda.nvtx, "range", _nvtx_range)
    for module_name in ("torch.cuda.streams", "torch.cuda.graphs", "torch.cuda.memory", "torch.cuda.random"):
        module = sys.modules.get(module_name)
        if module is not None:
            _mirror(patches, module, torch.cuda)


def _map_devices(patches: Patches, cuda: SimulatedCuda, device_mapping: str) -> None:
    """Map CUDA devices to CPU by patching the factories and moves, or by a TorchFunctionMode."""
    if device_mapping == "patch":
        cuda_devices.patch_tensors(patches, cuda.placements)
    elif device_mapping == "mode":
        mode = cuda_devices.make_mode(cuda.placements)
        mode.__enter__()
        patches.on_undo(lambda: mode.__exit__(None, None, None))
    else:
        patches.undo()
        raise ValueError(f"device_mapping must be 'patch' or 'mode', not {device_mapping!r}")


def _mirror(patches: Patches, module: Any, source: Any) -> None:
    """torch.cuda's submodules (``torch.cuda.streams.Stream``) get the same replacements."""
    for name in (
        *SIMULATED_FUNCTIONS,
        "Stream",
        "Event",
        *cuda_api.REFUSED_CUDA_NAMES,
        *cuda_api.ZERO_FUNCTIONS,
    ):
        if name in module.__dict__:
            patches.replace(module, name, getattr(source, name))


def _device_context(cuda: SimulatedCuda) -> type:
    class device:
        """``with torch.cuda.device(i):`` makes ``i`` the current device for the block."""

        def __init__(self, device: Any) -> None:
            self.index = -1 if device is None else cuda.index(device, optional=True)
            self.previous = -1

        def __enter__(self) -> None:
            self.previous = cuda.current_index
            if self.index >= 0:
                cuda.current_index = self.index

        def __exit__(self, *exc_info: object) -> None:
            cuda.current_index = self.previous

    return device


def _device_of_context(cuda: SimulatedCuda) -> Any:
    device_class = _device_context(cuda)

    def device_of(obj: Any) -> Any:
        return device_class(None)  # every tensor is a CPU tensor: the current device stays

    return device_of


class _nvtx_range:
    """``torch.cuda.nvtx.range(msg)``: a no-op context manager and decorator."""

    def __init__(self, msg: str = "", *args: Any, **kwargs: Any) -> None:
        self.msg = msg

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc_info: object) -> None:
        return None

    def __call__(self, function: Any) -> Any:
        return function


__all__ = ["REFUSED_MODULES", "DeviceSpec", "RefusedImports", "SimulatedCuda", "Unsupported", "install_cuda"]
