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
``cpu`` and ``tensor.is_cuda`` is False. A "cuda" tensor is a CPU tensor that nothing tells apart
from one the script made on the CPU, so answering ``cuda`` would mislabel every CPU tensor too.

Around the tensors: ``torch.autocast("cuda")`` (and ``torch.cuda.amp.autocast``) becomes CPU
autocast with the dtype CUDA would use (float16 unless the script names one); ``GradScaler("cuda")``
scales on CPU; ``torch.load(map_location="cuda:N")`` loads to CPU; ``DistributedDataParallel``
ignores ``device_ids``/``output_device`` (the module is on CPU, where torch refuses them);
``DataParallel`` runs the module on its one device; a ``DeviceMesh("cuda")`` is a CPU mesh.
"""

from __future__ import annotations

import functools
import inspect
from typing import Any

from timetravel.torch.rank.env.patching import Patches
from timetravel.torch.rank.errors import passes_through


def is_cuda_device(device: Any) -> bool:
    """True for what torch reads as a CUDA device: "cuda", "cuda:N", torch.device("cuda"), an index."""
    if isinstance(device, str):
        return device == "cuda" or device.startswith("cuda:")
    if isinstance(device, int):
        return not isinstance(device, bool)
    kind = getattr(device, "type", None)
    return kind == "cuda"


def map_device(device: Any) -> Any:
    """``device`` with a CUDA device replaced by the CPU (anything else unchanged)."""
    return "cpu" if is_cuda_device(device) else device


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

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.real_to = torch._C.TensorBase.to
        self.real_type = torch._C.TensorBase.type

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
        return self.real_to(tensor, *args, **kwargs)

    @passes_through
    def cuda(self, tensor: Any, device: Any = None, non_blocking: bool = False, **kwargs: Any) -> Any:
        memory_format = kwargs.get("memory_format", self.torch.preserve_format)
        return self.real_to(tensor, "cpu", non_blocking=non_blocking, copy=True, memory_format=memory_format)

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


def patch_tensors(patches: Patches) -> None:
    """Map CUDA devices by replacing the factory functions and tensor methods (the default, cheap way)."""
    import torch
    import torch.fft
    import torch.jit._builtins as jit_builtins

    moves = TensorMoves()
    for name in TensorMoves.METHODS:
        patches.replace(torch.Tensor, name, _method(getattr(moves, name), name))
    for name in TENSOR_FACTORY_METHODS:
        patches.wrap(torch.Tensor, name, _factory)
    namespaces: list[tuple[Any, str, list[str]]] = [
        (torch, "torch", factory_names()),
        (torch.fft, "torch.fft", ["fftfreq", "rfftfreq"]),
    ]
    for namespace, prefix, names in namespaces:
        for name in names:
            original = namespace.__dict__.get(name)
            if original is None:
                continue
            patches.wrap(namespace, name, _factory)
            wrapper = namespace.__dict__[name]
            op = f"aten::{name}" if prefix == "torch" else f"aten::fft_{name}"
            table = jit_builtins._get_builtin_table()
            table[id(wrapper)] = op  # TorchScript resolves the wrapper to the same aten op
            patches.on_undo(_forget_builtin(table, id(wrapper)))
    patches.wrap(torch, "set_default_device", _default_device)
    patches.wrap(torch.nn.Module, "to", _module_to)


def _module_to(original: Any) -> Any:
    """``Module.to(0)``, ``.to(torch.device(0))``, ``.to(device=local_rank)``: torch's ``Module.to``
    parses an index as the C++ accelerator's device, which a CPU build has none of."""

    @passes_through
    def to(self: Any, *args: Any, **kwargs: Any) -> Any:
        if args and is_cuda_device(args[0]):
            args = ("cpu", *args[1:])
        if is_cuda_device(kwargs.get("device")):
            kwargs = {**kwargs, "device": "cpu"}
        return original(self, *args, **kwargs)

    return to


def patch_device_type(patches: Patches) -> None:
    """``torch.device(0)`` is ``cuda:0``, as in a CUDA build (a CPU build's C++ refuses an index: no
    accelerator), and ``with torch.device("cuda")`` / ``set_default_device("cuda")`` make CPU tensors
    while ``with torch.device("meta")`` keeps its meaning.

    ``torch.device`` becomes a class whose construction returns a real ``torch.device`` and whose
    metaclass keeps ``isinstance(d, torch.device)`` true for every device (as :func:`patch_generator`
    does for generators). Only the name ``torch.device`` is replaced: torch's own aliases stay."""
    import torch
    import torch.utils._device as device_context

    real = torch.device

    class DeviceType(type):
        def __instancecheck__(cls, instance: Any) -> bool:
            return isinstance(instance, real)

        def __subclasscheck__(cls, subclass: type) -> bool:
            return issubclass(subclass, real)

        # torch's own code compares its type with the name (torch.fx: ``obj != torch.device``)
        def __eq__(cls, other: object) -> bool:
            return other is cls or other is real

        def __ne__(cls, other: object) -> bool:
            return not (other is cls or other is real)

        def __hash__(cls) -> int:
            return hash(real)

    class device(metaclass=DeviceType):  # torch's name
        __doc__ = real.__doc__

        @passes_through
        def __new__(cls, *args: Any, **kwargs: Any) -> Any:
            if len(args) == 1 and not kwargs and isinstance(args[0], int) and not isinstance(args[0], bool):
                return real("cuda", args[0])
            return real(*args, **kwargs)

    device.__module__ = "torch"
    patches.replace(torch, "device", device, aliases=False)
    device_context._device_constructors()  # torch's own factories, cached before they are wrapped

    def wrap_context(original: Any) -> Any:
        @functools.wraps(original)
        def __init__(self: Any, device: Any) -> None:
            original(self, map_device(device))

        return __init__

    patches.wrap(device_context.DeviceContext, "__init__", wrap_context)


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


def _factory(original: Any) -> Any:
    @passes_through
    def factory(*args: Any, **kwargs: Any) -> Any:
        if kwargs:
            kwargs = _cpu_kwargs(kwargs)
        return original(*args, **kwargs)

    return factory


def _default_device(original: Any) -> Any:
    def set_default_device(device: Any) -> None:
        original(map_device(device))

    return set_default_device


def make_mode() -> Any:
    """The TorchFunctionMode way of mapping CUDA devices (``device_mapping="mode"``).

    It also catches calls that reach torch by paths the patches miss, at a price: every torch call
    of the thread, attribute reads such as ``tensor.shape`` included, goes through Python
    (docs/torch.md has the figure).
    """
    import torch
    from torch.overrides import TorchFunctionMode

    moves = TensorMoves()
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


def patch_parallel(patches: Patches) -> None:
    """DDP without device_ids (a CPU module), DataParallel on one device, CPU device meshes."""
    import torch.nn.parallel

    ddp_class = torch.nn.parallel.DistributedDataParallel
    ddp_signature = inspect.signature(ddp_class.__init__)

    def wrap_ddp(original: Any) -> Any:
        @functools.wraps(original)
        @passes_through
        def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
            bound = ddp_signature.bind(self, *args, **kwargs)
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
