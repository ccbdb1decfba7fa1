"""CUDA devices mapped onto the CPU: wrapped factories and tensor moves, wrappers for the APIs around them.

:func:`patch_tensors` wraps torch's factory functions (every public ``torch.<name>`` whose aten
schema takes a ``device``, found from the schemas at install time) and the tensor move methods
(``nn.Module.to``/``.cuda()`` reach them), and rewrites a CUDA device — ``"cuda"``,
``"cuda:1"``, ``torch.device("cuda", 1)`` or a bare index such as ``device=local_rank`` — to the
CPU. :func:`make_mode` does the same from a TorchFunctionMode, at a price on every torch call.
Moves keep a GPU's copy semantics where the script names CUDA: ``x.cuda()`` and
``x.to("cuda:0")`` return a copy (so ``torch.randn(3, requires_grad=True).cuda()`` is a non-leaf,
as on a GPU), and ``x.cpu()`` returns a copy (so ``old = p.detach().cpu()`` is a snapshot, as
on a GPU, not an alias of ``p``). ``.to("cpu")`` and ``.to(other.device)`` keep torch's own
meaning (the tensor itself when nothing changes), because torch's device-agnostic internals use
them. ``pin_memory()`` is a copy; ``record_stream`` does nothing.

What a script sees differently from a GPU (documented in docs/torch.md): ``tensor.device`` is
``cpu`` and ``tensor.is_cuda`` is False. A "cuda" tensor is a CPU tensor: the moves and factories
tell :mod:`.cuda_placements` which ones the script put on CUDA, where torch's checks need to know.

Around the tensors: ``torch.autocast("cuda")`` (and ``torch.cuda.amp.autocast``) becomes CPU
autocast with the dtype CUDA would use (float16 unless the script names one); ``GradScaler("cuda")``
scales on CPU; ``torch.load(map_location="cuda:N")`` loads to CPU; ``DistributedDataParallel``
ignores ``device_ids``/``output_device`` of a module the script put on CUDA (it is on the CPU, where
torch refuses them) and refuses them, as torch does, for a module it never put there;
``DataParallel`` runs the module on its one device; a ``DeviceMesh("cuda")`` is a CPU mesh.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from timetravel.torch.rank.env.cuda_placements import Placements, is_cuda_device, map_device
from timetravel.torch.rank.env.patching import Patches
from timetravel.torch.rank.errors import passes_through

EXTRA_FACTORIES = ("asarray",)
"""torch functions taking ``device=`` that the aten schemas do not name (Python bindings)."""
TENSOR_FACTORY_METHODS = ("new_empty", "new_empty_strided", "new_full", "new_ones", "new_zeros", "new_tensor")


def factory_names() -> list[str]:
    """The public ``torch.<name>`` functions whose aten schema takes a ``device`` or ``pin_memory``."""
    import torch

    names = set(EXTRA_FACTORIES)
    for schema in torch._C._jit_get_all_schemas():
        if schema.name.startswith("aten::") and any(
            argument.name in ("device", "pin_memory") for argument in schema.arguments
        ):
            names.add(schema.name[len("aten::") :])
    return sorted(
        name
        for name in names
        if not name.startswith("_")
        and callable(torch.__dict__.get(name))
        and not isinstance(torch.__dict__.get(name), type)  # torch.Generator is a class: not mapped
    )


def _cpu_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` with a CUDA ``device`` replaced by the CPU and ``pin_memory`` off."""
    device = kwargs.get("device")
    if device is not None and is_cuda_device(device):
        kwargs = {**kwargs, "device": "cpu"}
    if kwargs.get("pin_memory"):
        kwargs = {**kwargs, "pin_memory": False}
    return kwargs


class TensorMoves:
    """The tensor methods that move between devices, with a GPU's copy semantics (module docstring)."""

    def __init__(self, placements: Placements) -> None:
        import torch

        self.torch = torch
        self.real_to = torch._C.TensorBase.to
        self.real_type = torch._C.TensorBase.type
        self.placements = placements

    @passes_through
    def to(self, tensor: Any, *args: Any, **kwargs: Any) -> Any:
        names_cuda = is_cuda_device(kwargs.get("device")) or (bool(args) and is_cuda_device(args[0]))
        if not names_cuda:
            return self.real_to(tensor, *args, **kwargs)
        if "device" in kwargs:
            kwargs = {**kwargs, "device": "cpu"}
        else:
            args = ("cpu", *args[1:])
        kwargs.setdefault("copy", True)
        return self.placements.tensor(self.real_to(tensor, *args, **kwargs))

    @passes_through
    def cuda(self, tensor: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        memory_format = kwargs.get("memory_format", self.torch.preserve_format)
        moved = self.real_to(tensor, "cpu", non_blocking=non_blocking, copy=True, memory_format=memory_format)
        return self.placements.tensor(moved)

    @passes_through
    def cpu(self, tensor: Any, memory_format: Any = None) -> Any:
        memory_format = self.torch.preserve_format if memory_format is None else memory_format
        return self.real_to(tensor, "cpu", copy=True, memory_format=memory_format)

    def pin_memory(self, tensor: Any, device: Any = None) -> Any:
        return tensor.clone()

    def is_pinned(self, tensor: Any, device: Any = None) -> bool:
        return False

    def record_stream(self, tensor: Any, stream: Any) -> None:
        return None

    @passes_through
    def type(self, tensor: Any, dtype: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        if isinstance(dtype, str) and dtype.startswith("torch.cuda."):
            dtype = "torch." + dtype[len("torch.cuda.") :]
        if dtype is None:
            return self.real_type(tensor)
        return self.real_type(tensor, dtype, non_blocking, **kwargs)

    METHODS = ("to", "cuda", "cpu", "pin_memory", "is_pinned", "record_stream", "type")


def patch_tensors(patches: Patches, placements: Placements) -> None:
    """Map CUDA devices by replacing the factory functions and tensor methods (the default, cheap way)."""
    import torch
    import torch.fft
    import torch.jit._builtins as jit_builtins

    moves = TensorMoves(placements)
    for name in TensorMoves.METHODS:
        patches.replace(torch.Tensor, name, _method(getattr(moves, name), name))
    factory = functools.partial(_factory, placements)
    for name in TENSOR_FACTORY_METHODS:
        patches.wrap(torch.Tensor, name, factory)
    namespaces: list[tuple[Any, str, list[str]]] = [
        (torch, "torch", factory_names()),
        (torch.fft, "torch.fft", ["fftfreq", "rfftfreq"]),
    ]
    for namespace, prefix, names in namespaces:
        for name in names:
            original = namespace.__dict__.get(name)
            if original is None:
                continue
            patches.wrap(namespace, name, factory)
            wrapper = namespace.__dict__[name]
            op = f"aten::{name}" if prefix == "torch" else f"aten::fft_{name}"
            table = jit_builtins._get_builtin_table()
            table[id(wrapper)] = op  # TorchScript resolves the wrapper to the same aten op
            patches.on_undo(_forget_builtin(table, id(wrapper)))
    patches.wrap(torch, "set_default_device", _default_device)


def _forget_builtin(table: dict[int, str], key: int) -> Any:
    def undo() -> None:
        table.pop(key, None)

    return undo


def _method(implementation: Any, name: str) -> Any:
    @passes_through
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        return implementation(self, *args, **kwargs)

    method.__name__ = method.__qualname__ = name
    return method


def _factory(placements: Placements, original: Any) -> Any:
    @passes_through
    def factory(*args: Any, **kwargs: Any) -> Any:
        if not kwargs:
            made = original(*args)  # inside ``with torch.device("cuda")`` a CUDA tensor
            return placements.tensor(made) if placements.cuda_default else made
        device = kwargs.get("device")
        made = original(*args, **_cpu_kwargs(kwargs))
        if is_cuda_device(device) or (device is None and placements.cuda_default):
            placements.tensor(made)
        return made

    return factory


def _default_device(original: Any) -> Any:
    def set_default_device(device: Any) -> None:
        original(map_device(device))

    return set_default_device


def make_mode(placements: Placements) -> Any:
    """The TorchFunctionMode way of mapping CUDA devices (``device_mapping="mode"``).

    It also catches calls that reach torch by paths the patches miss, at a price: every torch call
    of the thread, attribute reads such as ``tensor.shape`` included, goes through Python
    (docs/torch.md has the figure).
    """
    import torch
    from torch.overrides import TorchFunctionMode

    moves = TensorMoves(placements)
    handlers = {getattr(torch.Tensor, name): getattr(moves, name) for name in TensorMoves.METHODS}

    class CudaOnCpu(TorchFunctionMode):
        """Rewrites CUDA devices to the CPU in every torch call (see the module docstring)."""

        def __torch_function__(
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
        ) -> Any:
            if kwargs is None:
                kwargs = {}
            handler = handlers.get(func)
            if handler is not None:
                return handler(*args, **kwargs)
            if kwargs and is_cuda_device(kwargs.get("device")):
                return placements.tensor(func(*args, **_cpu_kwargs(kwargs)))
            if kwargs:
                kwargs = _cpu_kwargs(kwargs)
            return func(*args, **kwargs)

    return CudaOnCpu()


def patch_generator(patches: Patches) -> None:
    """``torch.Generator(device="cuda")`` makes a CPU generator (the tensors it feeds are CPU tensors).

    ``torch.Generator`` becomes a subclass whose construction returns a real ``torch._C.Generator``
    and whose metaclass keeps ``isinstance(g, torch.Generator)`` true for every generator. Only the
    name ``torch.Generator`` is replaced: ``torch._C.Generator`` and its other aliases stay.
    """
    import torch

    base = torch._C.Generator

    class GeneratorType(type(base)):  # type: ignore[misc]
        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, base)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, base)

    class Generator(base, metaclass=GeneratorType):  # type: ignore[misc,valid-type]
        __doc__ = base.__doc__

        @passes_through
        def __new__(cls, device: Any = "cpu") -> Any:
            return base(map_device(device))

    Generator.__module__ = "torch"
    patches.replace(torch, "Generator", Generator, aliases=False)


def patch_amp(patches: Patches) -> None:
    """autocast("cuda") -> CPU autocast with CUDA's dtype; GradScaler("cuda") -> a CPU GradScaler."""
    import torch
    from torch.amp import autocast_mode, grad_scaler

    def wrap_autocast(original: Any) -> Any:
        @functools.wraps(original)
        def __init__(self: Any, device_type: str, dtype: Any = None, *args: Any, **kwargs: Any) -> None:
            if device_type == "cuda":
                if dtype is None:
                    dtype = torch.get_autocast_dtype("cuda")
                device_type = "cpu"
            original(self, device_type, dtype, *args, **kwargs)

        return __init__

    patches.wrap(autocast_mode.autocast, "__init__", wrap_autocast)

    def wrap_scaler(original: Any) -> Any:
        @functools.wraps(original)
        def __init__(self: Any, device: str = "cuda", *args: Any, **kwargs: Any) -> None:
            original(self, "cpu" if device == "cuda" else device, *args, **kwargs)

        return __init__

    patches.wrap(grad_scaler.GradScaler, "__init__", wrap_scaler)


def map_location(location: Any) -> Any:
    """``torch.load``'s map_location with every CUDA target replaced by the CPU."""
    if location is None:
        return "cpu"  # a checkpoint written on a real GPU names cuda:N storages
    if isinstance(location, dict):
        return {key: map_device(value) for key, value in location.items()}
    if callable(location):
        return location
    return map_device(location)


def patch_load(patches: Patches) -> None:
    import torch
    import torch.serialization

    def wrap(original: Any) -> Any:
        @functools.wraps(original)
        def load(f: Any, map_location_value: Any = None, *args: Any, **kwargs: Any) -> Any:
            if "map_location" in kwargs:
                map_location_value = kwargs.pop("map_location")
            return original(f, map_location(map_location_value), *args, **kwargs)

        return load

    original = patches.wrap(torch.serialization, "load", wrap)
    if torch.__dict__.get("load") is original:
        patches.replace(torch, "load", torch.serialization.load)


def patch_parallel(patches: Patches, placements: Placements) -> None:
    """DDP of a module put on CUDA without device_ids (it is on the CPU, where torch refuses them), of a
    module never put there as torch takes it (device_ids: torch's ValueError); DataParallel on one
    device; CPU device meshes."""
    import torch.nn.parallel

    ddp_class = torch.nn.parallel.DistributedDataParallel
    ddp_signature = inspect.signature(ddp_class.__init__)

    def wrap_ddp(original: Any) -> Any:
        @functools.wraps(original)
        @passes_through
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            bound = ddp_signature.bind(self, *args, **kwargs)
            module = bound.arguments.get("module")
            if not isinstance(module, torch.nn.Module) or not placements.holds_module(module):
                original(self, *args, **kwargs)  # a CPU module: torch's own checks, device_ids refused
                return
            bound.arguments.pop("device_ids", None)
            bound.arguments.pop("output_device", None)
            original(*bound.args, **bound.kwargs)

        return __init__

    patches.wrap(ddp_class, "__init__", wrap_ddp)

    def wrap_data_parallel(original: Any) -> Any:
        @functools.wraps(original)
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            original(self, *args, **kwargs)
            self.device_ids = []  # forward then calls the module itself: one device, no scatter/gather

        return __init__

    patches.wrap(torch.nn.parallel.DataParallel, "__init__", wrap_data_parallel)
    try:
        from torch.distributed import device_mesh
    except ImportError:  # pragma: no cover - a torch built without distributed
        return

    def wrap_mesh(original: Any) -> Any:
        @functools.wraps(original)
        def __init__(self: Any, device_type: str, *args: Any, **kwargs: Any) -> None:
            original(self, "cpu" if device_type == "cuda" else device_type, *args, **kwargs)

        return __init__

    def wrap_init_mesh(original: Any) -> Any:
        @functools.wraps(original)
        def init_device_mesh(device_type: str, *args: Any, **kwargs: Any) -> Any:
            return original("cpu" if device_type == "cuda" else device_type, *args, **kwargs)

        return init_device_mesh

    if hasattr(device_mesh, "DeviceMesh") and "__init__" in device_mesh.DeviceMesh.__dict__:
        patches.wrap(device_mesh.DeviceMesh, "__init__", wrap_mesh)
    if hasattr(device_mesh, "init_device_mesh"):
        patches.wrap(device_mesh, "init_device_mesh", wrap_init_mesh)
