"""What ``--against-real`` compares, captured inside a rank: the same code in real torchrun's ranks
(:mod:`.real_rank`) and in the simulator's (rank/setup.py, when the launch asks for it).

:func:`install` opens the rank's capture file (protocol/capture.py) at once — before the simulator's
file watch, so that its writes are not the script's — and hooks, read-only:

* module and parameter registration (torch's global hooks), to name each parameter as in its
  outermost module's ``state_dict()``;
* ``backward`` (:mod:`.env.loss_capture`): the loss of each optimizer step;
* every optimizer's step (a global post hook): one ``step`` record with that loss and the state of
  the modules that own the optimizer's parameters — their parameters and buffers (``named_parameters``
  and ``named_buffers``: no ``state_dict()`` hook runs, so FSDP1 gathers nothing);
* :meth:`Capture.finish`, called when the script returned or raised: an ``end`` record with the state
  of those modules if they are still alive.

Nothing here changes a tensor, draws a random number or calls a collective: the run it watches is the
run it would have been.
"""

from __future__ import annotations

import os
import weakref
from typing import Any

import torch
import xxhash
from torch.optim.optimizer import register_optimizer_step_post_hook

from timetravel.torch.protocol.capture import (
    CAPTURE_RECORD_BYTES_MAX,
    CAPTURE_VALUES_BYTES_MAX,
    capture_path,
    write_record,
)
from timetravel.torch.rank.env.loss_capture import LossCapture, install_loss_capture

WRAPPER_SEGMENTS = ("module", "_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module")
"""Name segments that wrappers add (DDP, torch.compile, FSDP1, activation checkpointing)."""
MODULE_DEPTH_MAX = 256
"""Parents followed from a parameter's module to its outermost one (a cycle stops there too)."""


def state_name(name: str) -> str:
    return ".".join(segment for segment in name.split(".") if segment not in WRAPPER_SEGMENTS)


class Capture:
    """One rank's capture; see the module docstring."""

    def __init__(self, descriptor: int) -> None:
        self.descriptor = descriptor
        self.steps = 0
        self.values_bytes = 0
        self.owners: dict[int, weakref.ref[torch.nn.Module]] = {}
        """id(parameter) -> the module it was registered on."""
        self.parents: dict[int, tuple[weakref.ref[torch.nn.Module], str]] = {}
        """id(module) -> (the module holding it, the attribute)."""
        self.roots: list[weakref.ref[torch.nn.Module]] = []
        """The outermost modules of the last step's optimizer parameters."""
        self.loss: float | None = None
        self.losses = LossCapture(self._loss_sent, lambda: 0)

    # -- hooks -------------------------------------------------------------------------------------

    def parameter_registered(self, module: torch.nn.Module, name: str, parameter: Any) -> None:
        if parameter is not None:
            self.owners[id(parameter)] = weakref.ref(module)

    def module_registered(self, module: torch.nn.Module, name: str, submodule: Any) -> None:
        if isinstance(submodule, torch.nn.Module):
            self.parents[id(submodule)] = (weakref.ref(module), name)

    def _loss_sent(self, name: str, value: float, step: int, t_ns: int) -> None:
        self.loss = value

    def step_done(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.steps += 1
        self.loss = None
        self.losses.step_done(self.steps)
        self.losses.flush()
        roots, loose = self._roots(optimizer)
        self.roots = [weakref.ref(root) for root in roots]
        tensors = self._state(roots) + [
            self._tensor(f"param_groups.{group}.{position}", parameter)
            for group, position, parameter in loose
        ]
        self._write({"kind": "step", "step": self.steps, "loss": self.loss, "tensors": tensors})

    def finish(self, ended: str = "returned") -> None:
        """The script returned or raised: the ``end`` record (state of the modules still alive, and how
        the script ended: ``returned``, ``exit N`` or ``raised Type``)."""
        if self.descriptor < 0:
            return
        roots = [root for root in (ref() for ref in self.roots) if root is not None]
        try:
            self._write({"kind": "end", "ended": ended, "tensors": self._state(roots)})
        finally:
            os.close(self.descriptor)
            self.descriptor = -1

    # -- the state ---------------------------------------------------------------------------------

    def _roots(self, optimizer: torch.optim.Optimizer) -> tuple[list[torch.nn.Module], list[Any]]:
        """The outermost modules owning the optimizer's parameters, and the parameters none owns
        (group, position, parameter). A parameter swapped in without registration (FSDP2's sharded
        ones) is looked for in the outermost module of every module seen."""
        roots: dict[int, torch.nn.Module] = {}
        unknown = []
        for group_index, group in enumerate(optimizer.param_groups):
            for position, parameter in enumerate(group["params"]):
                owner = self.owners.get(id(parameter))
                module = owner() if owner is not None else None
                if module is None:
                    unknown.append((group_index, position, parameter))
                    continue
                root = self._outermost(module)
                roots.setdefault(id(root), root)
        if unknown:
            for root in self._every_root():
                held = {id(parameter) for parameter in root.parameters()}
                if any(id(parameter) in held for _, _, parameter in unknown):
                    roots.setdefault(id(root), root)
                    unknown = [entry for entry in unknown if id(entry[2]) not in held]
        return list(roots.values()), unknown

    def _every_root(self) -> list[torch.nn.Module]:
        roots: dict[int, torch.nn.Module] = {}
        for owner in list(self.owners.values()):
            module = owner()
            if module is not None:
                root = self._outermost(module)
                roots.setdefault(id(root), root)
        return list(roots.values())

    def _outermost(self, module: torch.nn.Module) -> torch.nn.Module:
        seen = {id(module)}
        for _ in range(MODULE_DEPTH_MAX):
            parent = self.parents.get(id(module))
            holder = parent[0]() if parent is not None else None
            if holder is None or id(holder) in seen:
                break
            seen.add(id(holder))
            module = holder
        return module

    def _state(self, roots: list[torch.nn.Module]) -> list[dict[str, Any]]:
        tensors: dict[str, dict[str, Any]] = {}
        for root in roots:
            for name, tensor in (*root.named_parameters(), *root.named_buffers()):
                key = state_name(name)
                if key not in tensors:
                    tensors[key] = self._tensor(key, tensor)
        return list(tensors.values())

    def _tensor(self, name: str, tensor: torch.Tensor) -> dict[str, Any]:
        data = tensor.detach()
        if hasattr(data, "to_local"):
            data = data.to_local()
        if data.device.type != "cpu":
            data = data.cpu()
        flat = data.contiguous().reshape(-1)
        raw = flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)
        array = raw.numpy()
        keep = self.values_bytes + array.nbytes <= CAPTURE_VALUES_BYTES_MAX
        keep = keep and array.nbytes <= CAPTURE_RECORD_BYTES_MAX // 2
        if keep:
            self.values_bytes += array.nbytes
        return {
            "name": name,
            "dtype": str(data.dtype).removeprefix("torch."),
            "shape": list(data.shape),
            "digest": xxhash.xxh3_64_hexdigest(array),  # type: ignore[arg-type]  # hashed in place
            "data": array.tobytes() if keep else None,
        }

    def _write(self, record: dict[str, Any]) -> None:
        if self.descriptor >= 0:
            write_record(self.descriptor, record)


def install(folder: str, rank: int) -> Capture:
    """Start capturing rank ``rank`` into ``folder`` (see the module docstring)."""
    from torch.nn.modules.module import (
        register_module_module_registration_hook,
        register_module_parameter_registration_hook,
    )

    path = capture_path(folder, rank)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    capture = Capture(descriptor)
    register_module_parameter_registration_hook(capture.parameter_registered)
    register_module_module_registration_hook(capture.module_registered)
    install_loss_capture(capture.losses)
    register_optimizer_step_post_hook(capture.step_done)
    return capture
