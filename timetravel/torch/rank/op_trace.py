"""``diff --ops``: every torch op of one optimizer step, hashed as it runs (rank side, imports torch).

``timetravel diff REC A B --ops`` re-executes, on both branches, the first step in which they differ,
with this trace in every rank (``settings["probe"]["ops"]``, or asked of a resumed rank while it
waits: torch/world/op_probe.py). During optimizer step S — from the end of step S-1's
``optimizer.step()`` (the rank's start for S = 1) to the end of step S's — a ``TorchDispatchMode``
sees each op (DTensor ops at the DTensor level, a DTensor output hashed by its local shard) and
notes, in execution order: the module it ran in (a global forward pre/post hook keeps the stack of
module names; in backward, the module whose output's gradient autograd computed last), the op
(``aten::mm``), its occurrence (how many times this module ran this op before in the step), the
output shapes and dtypes and an xxh3-64 digest of the output bytes. A collective is an op too
(``c10d::all_reduce``): the tensors its result wrote, when the result arrives.

The records go to the coordinator in ``probe`` messages (``ops``) before every blocking call (so a
run that fails mid-step has posted every op it ran before its last call to the World), and at the
end of the step (``done``). Asked to ``capture`` some (module, op, occurrence) keys, the trace also
sends those ops' output values (``values``), from which the coordinator computes the differences.

It only reads: hashing copies nothing into the computation, draws no random number and the hooks
return None, so the rank computes the same bits and the World sees the same events (the
re-execution checks the recorded hash chain).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

import torch
import xxhash
from torch.utils._python_dispatch import TorchDispatchMode

from timetravel.torch.rank.backend import tensor_to_wire
from timetravel.torch.rank.channel import Channel

OPS_PER_STEP_MAX = 200_000
"""Ops recorded per rank and step (past it the trace says it stopped)."""
OPS_PER_MESSAGE = 2048
VALUES_BYTES_MAX = 64 * 1024 * 1024
"""Bytes of captured output values a rank sends at most (the rest of the captures are skipped)."""
BACKWARD = "(backward)"
_RANK = os.path.dirname(os.path.abspath(__file__))
SIMULATOR_FILES = frozenset(
    os.path.join(_RANK, name)
    for name in (
        "state.py",  # the step report and the local-gradient hook
        "setup.py",
        "probe.py",
        "init_watch.py",
        "backend.py",  # a collective's result copied in: the collective is an op of its own
        "batches.py",
        os.path.join("env", "loss_capture.py"),
        os.path.join("env", "metrics_capture.py"),
    )
)
"""The simulator's own hooks in a rank: ops they run are not the script's (they are not hashed)."""


def by_the_simulator() -> bool:
    """Whether the op being dispatched was called from one of the simulator's own hooks."""
    frame: Any = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename in SIMULATOR_FILES:
            return True
        frame = frame.f_back
    return False


def _outputs(value: Any) -> list[Any]:
    """The tensors (and plain numbers) an op returned, flattened in order."""
    if isinstance(value, (list, tuple)):
        return [item for part in value for item in _outputs(part)]
    return [value] if isinstance(value, (torch.Tensor, int, float, bool)) else []


def _written(schema: Any, args: Any, kwargs: dict[str, Any]) -> list[Any]:
    """The tensors an op wrote in place (``Tensor(a!)`` arguments: ``_foreach_add_``'s lists)."""
    written = []
    for position, argument in enumerate(schema.arguments):
        if argument.alias_info is not None and argument.alias_info.is_write:
            value = args[position] if position < len(args) else kwargs.get(argument.name)
            written += [item for item in _outputs(value) if isinstance(item, torch.Tensor)]
    return written


def _local(tensor: torch.Tensor) -> torch.Tensor:
    data = getattr(tensor, "_local_tensor", tensor).detach()
    if data.device.type != "cpu":
        data = data.cpu()
    return data.contiguous()


def digest(outputs: list[Any]) -> tuple[list[list[int]], list[str], str]:
    """Shapes, dtypes and one xxh3-64 of an op's outputs (a tensor by its bytes, a number by repr)."""
    hasher = xxhash.xxh3_64()
    shapes, dtypes = [], []
    for item in outputs:
        if isinstance(item, torch.Tensor):
            data = _local(item)
            shapes.append(list(item.shape))
            dtypes.append(str(data.dtype).removeprefix("torch."))
            hasher.update(f"{dtypes[-1]}{list(data.shape)}".encode())
            if data.numel() and not data.is_meta:
                flat = data.reshape(-1)
                raw = flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)
                hasher.update(raw.numpy())  # type: ignore[arg-type]
        else:
            shapes.append([])
            dtypes.append(type(item).__name__)
            hasher.update(repr(item).encode())
    return shapes, dtypes, hasher.hexdigest()


class OpTrace(TorchDispatchMode):
    """See the module docstring. ``steps_done()``: the optimizer steps this rank completed;
    ``module_names()``: id(module) -> its name from the outermost module."""

    def __init__(
        self,
        channel: Channel,
        step: int,
        steps_done: Callable[[], int],
        module_names: Callable[[], dict[int, str]],
        capture: list[list[Any]] | None = None,
    ) -> None:
        super().__init__()
        self.channel = channel
        self.step = step
        self.steps_done = steps_done
        self.module_names = module_names
        self.capture = {(str(m), str(o), int(n)) for m, o, n in capture or []}
        self.names: dict[int, str] | None = None
        self.stack: list[str] = []
        self.backward_module = ""
        self.occurrences: dict[tuple[str, str], int] = {}
        self.pending: list[list[Any]] = []
        self.count = 0
        self.values_bytes = 0
        self.active = False
        self.finished = False
        self._handles: list[Any] = []

    # -- when --------------------------------------------------------------------------------------

    def install(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook

        self._handles.append(register_module_forward_pre_hook(self._enter_module))
        self._handles.append(register_module_forward_hook(self._leave_module))
        self.channel.before_blocking.append(self.flush)
        self.channel.result_observers.append(self._collective)
        if self.steps_done() + 1 == self.step:
            self._start()

    def step_done(self) -> None:
        """After each optimizer step: start at the end of step S-1, finish at the end of step S."""
        done = self.steps_done()
        if done + 1 == self.step and not self.active and not self.finished:
            self._start()
        elif done == self.step and self.active:
            self._finish()

    def _start(self) -> None:
        self.active = True
        self.__enter__()

    def _finish(self) -> None:
        from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode

        self.active = False
        self.finished = True
        if _get_current_dispatch_mode() is self:
            _pop_mode()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        self.flush()
        self.channel.post({"kind": "probe", "step": self.step, "done": True, "ops_count": self.count})

    # -- where -------------------------------------------------------------------------------------

    def _module(self, module: torch.nn.Module) -> str:
        if self.names is None:
            self.names = self.module_names()
        return self.names.get(id(module), type(module).__name__)

    def _enter_module(self, module: torch.nn.Module, inputs: Any) -> None:
        if self.active:
            self.stack.append(self._module(module))

    def _leave_module(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if not self.active or not self.stack:
            return
        name = self.stack.pop()
        for tensor in _outputs(output):
            if isinstance(tensor, torch.Tensor) and tensor.requires_grad and tensor.grad_fn is not None:
                tensor.register_hook(self._backward_of(name))

    def _backward_of(self, name: str) -> Callable[[torch.Tensor], None]:
        def mark(_gradient: torch.Tensor) -> None:
            self.backward_module = name

        return mark

    def where(self) -> str:
        if self.stack:
            return self.stack[-1]
        return f"{self.backward_module} {BACKWARD}" if torch._C._current_graph_task_id() >= 0 else ""

    # -- what ---------------------------------------------------------------------------------------

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.active and not by_the_simulator():
            outputs = _outputs(out)
            if not any(isinstance(item, torch.Tensor) for item in outputs):
                outputs = _written(func._schema, args, kwargs)  # an in-place op that returns nothing
            self.record(func._schema.name, outputs)
        return out

    def _collective(self, message: dict[str, Any], outputs: list[torch.Tensor]) -> None:
        if self.active:
            self.record(f"c10d::{message.get('op', '?')}", list(outputs))

    def record(self, op: str, outputs: list[Any]) -> None:
        if self.count >= OPS_PER_STEP_MAX:
            return
        module = self.where()
        occurrence = self.occurrences.get((module, op), 0)
        self.occurrences[(module, op)] = occurrence + 1
        shapes, dtypes, hexdigest = digest(outputs)
        self.pending.append(
            [self.count, self.channel.clock.now_ns(), module, op, occurrence, shapes, dtypes, hexdigest]
        )
        self.count += 1
        if (module, op, occurrence) in self.capture:
            self._send_values(module, op, occurrence, outputs)
        if len(self.pending) >= OPS_PER_MESSAGE:
            self.flush()

    def _send_values(self, module: str, op: str, occurrence: int, outputs: list[Any]) -> None:
        tensors = [_local(item) for item in outputs if isinstance(item, torch.Tensor)]
        size = sum(tensor.numel() * tensor.element_size() for tensor in tensors)
        if self.values_bytes + size > VALUES_BYTES_MAX:
            return
        self.values_bytes += size
        self.flush()
        self.channel.post(
            {
                "kind": "probe",
                "step": self.step,
                "values": {"key": [module, op, occurrence], "tensors": [tensor_to_wire(t) for t in tensors]},
            }
        )

    def flush(self) -> None:
        """Send the records not sent yet (before every blocking call: a rank is stopped only there)."""
        if self.pending:
            records, self.pending = self.pending, []
            self.channel.post({"kind": "probe", "step": self.step, "ops": records})
