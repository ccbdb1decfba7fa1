"""What the script put on a CUDA device, tracked where a GPU would have kept it (see :mod:`.cuda`).

Under the CUDA mapping every tensor is a CPU tensor, so ``tensor.device`` cannot tell one the script
moved to ``cuda`` from one it left on the CPU. :class:`Placements` remembers, weakly and by identity,
the tensors a CUDA move or factory returned (``.cuda()``, ``.to("cuda:1")``, ``device="cuda"``, a
factory inside ``with torch.device("cuda")``), the parameters made from them, and the modules moved
with ``Module.to``/``.cuda()``/``.to_empty``. Where torch checks a module's device, the simulator
checks there: ``DistributedDataParallel(module, device_ids=[i])`` of a module nothing of which was
ever put on CUDA gets torch's own ``ValueError`` (:mod:`.cuda_devices`), as on a GPU node.

Also here, the device spellings torch's C++ reads through the accelerator a CPU build lacks:
``torch.device(0)`` and ``Module.to(0)`` (``cuda:0`` on a GPU node), and ``with torch.device(...)``:
``cuda`` makes CPU tensors, ``meta`` keeps its meaning.
"""

from __future__ import annotations

import functools
import weakref
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


class Placements:
    """The tensors and modules the script put on a CUDA device (weak, by identity: a tensor's ``==``
    is element-wise, so no ``WeakSet``)."""

    def __init__(self) -> None:
        from torch.utils.weak import WeakIdKeyDictionary

        self._tensors: Any = WeakIdKeyDictionary()
        self._modules: Any = WeakIdKeyDictionary()
        self.cuda_default = 0
        """How many ``with torch.device("cuda")`` (or ``set_default_device("cuda")``) contexts live."""

    def tensor(self, tensor: Any) -> Any:
        """Remember ``tensor`` as a CUDA tensor; returns it."""
        if tensor is not None and hasattr(tensor, "__weakref__"):
            self._tensors[tensor] = True
        return tensor

    def holds_tensor(self, tensor: Any) -> bool:
        return tensor in self._tensors

    def module(self, module: Any) -> Any:
        """Remember ``module``, its submodules, parameters and buffers as moved to CUDA; returns it."""
        for sub in module.modules():
            self._modules[sub] = True
        for tensor in (*module.parameters(), *module.buffers()):
            self._tensors[tensor] = True
        return module

    def cuda_default_ended(self) -> None:
        self.cuda_default -= 1

    def holds_module(self, module: Any) -> bool:
        """Whether anything of ``module`` was put on CUDA (the module, a submodule or a parameter)."""
        return any(sub in self._modules for sub in module.modules()) or any(
            parameter in self._tensors for parameter in module.parameters()
        )


def patch_modules(patches: Patches, placements: Placements) -> None:
    """``Module.to``/``.cuda()``/``.to_empty`` remember what they moved to CUDA (and map an index), and a
    ``Parameter`` made from a CUDA tensor is one."""
    import torch

    def wrap_to(original: Any) -> Any:
        @passes_through
        def to(self: Any, *args: Any, **kwargs: Any) -> Any:
            # torch's Module.to parses an index as the C++ accelerator's device: a CPU build has none
            names_cuda = bool(args) and is_cuda_device(args[0])
            if names_cuda:
                args = ("cpu", *args[1:])
            if is_cuda_device(kwargs.get("device")):
                names_cuda = True
                kwargs = {**kwargs, "device": "cpu"}
            moved = original(self, *args, **kwargs)
            return placements.module(moved) if names_cuda else moved

        return to

    def wrap_cuda(original: Any) -> Any:
        @passes_through
        def cuda(self: Any, device: Any = None) -> Any:
            return placements.module(original(self, device))

        return cuda

    def wrap_to_empty(original: Any) -> Any:
        @passes_through
        def to_empty(self: Any, *, device: Any, recurse: bool = True) -> Any:
            moved = original(self, device=map_device(device), recurse=recurse)
            return placements.module(moved) if is_cuda_device(device) else moved

        return to_empty

    patches.wrap(torch.nn.Module, "to", wrap_to)
    patches.wrap(torch.nn.Module, "cuda", wrap_cuda)
    patches.wrap(torch.nn.Module, "to_empty", wrap_to_empty)
    parameter_class = torch.nn.Parameter
    real_new = parameter_class.__dict__["__new__"].__func__

    @passes_through
    def parameter_new(cls: Any, data: Any = None, requires_grad: bool = True) -> Any:
        parameter = real_new(cls, data, requires_grad)
        return placements.tensor(parameter) if placements.holds_tensor(data) else parameter

    patches.replace(parameter_class, "__new__", staticmethod(parameter_new), aliases=False)


def patch_device_type(patches: Patches, placements: Placements) -> None:
    """``torch.device(0)`` is ``cuda:0``, as in a CUDA build (a CPU build's C++ refuses an index: no
    accelerator), and ``with torch.device("cuda")`` / ``set_default_device("cuda")`` make CPU tensors
    (remembered as CUDA ones) while ``with torch.device("meta")`` keeps its meaning.

    ``torch.device`` becomes a class whose construction returns a real ``torch.device`` and whose
    metaclass keeps ``isinstance(d, torch.device)`` true for every device (as ``patch_generator``
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
    _patch_device_context(patches, placements, device_context.DeviceContext)


def _patch_device_context(patches: Patches, placements: Placements, context_class: Any) -> None:
    """``DeviceContext`` (``with torch.device(x)``, ``set_default_device``): CUDA becomes the CPU, and
    while a CUDA one lives the factories' tensors are remembered as CUDA tensors. (torch's C++ pushes
    ``with torch.device``'s context without calling ``__enter__``: its life is what tells.)"""

    def wrap_init(original: Any) -> Any:
        @functools.wraps(original)
        def __init__(self: Any, device: Any) -> None:
            original(self, map_device(device))
            if is_cuda_device(device):
                placements.cuda_default += 1
                weakref.finalize(self, placements.cuda_default_ended)

        return __init__

    patches.wrap(context_class, "__init__", wrap_init)
