"""The module probe (rank side, imports torch): which module's output or gradient went non-finite first.

``explain`` on a torch run ends at the step and rank where a NaN or Inf entered a collective. The
collective sees a bucket of gradients; the user needs the *module*. So explain re-executes the run
with ``probe: {"step": S}`` in this rank's settings (torch/module_probe.py), and during optimizer
step S (the one in progress after S-1 completed) this probe watches every module call:

* **forward** — a global forward hook checks each floating-point output tensor of every module as
  it returns (innermost first: a Linear's output before its Sequential's), noting whether the
  module's own inputs were already non-finite (then it came in from outside: the batch, an earlier
  computation that is not a module);
* **backward** — for each output that requires grad, a tensor hook checks the gradient of the loss
  with respect to it when autograd computes it (the ``grad_output`` a full backward hook sees), in
  backward order. Tensor hooks rather than ``register_full_backward_hook``: a full backward hook
  wraps the outputs in a view that an in-place op after the module (``ReLU(inplace=True)``)
  refuses, which would fail the probed re-execution where the recorded run did not.

The first finding (forward before backward, as they execute) is posted once as a ``probe`` message,
and a ``probe`` message with no module when step S ends without one. The hooks only read: they
return None, copy nothing into the graph and draw no random numbers, so the rank computes the same
bits and the World the same events as the recorded run; the coordinator keeps ``probe`` messages
outside the World (:mod:`timetravel.torch.world.module_probe`).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from timetravel.torch.rank.channel import Channel

TENSORS_PER_CALL_MAX = 64
"""Output tensors checked per module call (a module returning a long list is checked in its head)."""


def _tensors(value: Any, found: list[torch.Tensor]) -> list[torch.Tensor]:
    """The tensors in a module's output (a tensor, or tuples, lists and dicts of them), in order."""
    if len(found) >= TENSORS_PER_CALL_MAX:
        return found
    if isinstance(value, torch.Tensor):
        found.append(value)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _tensors(item, found)
    elif isinstance(value, dict):
        for key in sorted(value, key=str):
            _tensors(value[key], found)
    return found


def _nonfinite(tensor: torch.Tensor) -> dict[str, Any] | None:
    """Count, first flat index and value of a floating tensor's NaN/Inf elements (None: all finite)."""
    if not tensor.is_floating_point() or tensor.numel() == 0:
        return None
    data = tensor.detach()
    if hasattr(data, "to_local"):
        data = data.to_local()
    bad = ~torch.isfinite(data)
    count = int(bad.sum())
    if count == 0:
        return None
    first = int(bad.reshape(-1).nonzero()[0, 0])
    value = float(data.reshape(-1)[first])
    return {
        "nonfinite": count,
        "elements": int(data.numel()),
        "first_index": first,
        "value": "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf"),
        "shape": list(data.shape),
        "dtype": str(data.dtype).removeprefix("torch."),
    }


class ModuleProbe:
    """Watches step ``step`` of this rank (see the module docstring)."""

    def __init__(self, channel: Channel, step: int, steps_done: Any, module_names: Any) -> None:
        self.channel = channel
        self.step = step
        self.steps_done = steps_done
        """``steps_done()``: the optimizer steps this rank completed (the reporter's count)."""
        self.module_names = module_names
        """``module_names()``: id(module) -> its name from the outermost module (computed once)."""
        self.names: dict[int, str] | None = None
        self.reported = False
        self.calls = 0
        self.handle: Any = None

    def install(self) -> None:
        from torch.nn.modules.module import register_module_forward_hook

        self.handle = register_module_forward_hook(self._forward_hook)

    def watching(self) -> bool:
        return not self.reported and self.steps_done() + 1 == self.step

    def step_done(self) -> None:
        """After each optimizer step: step S ended with every output and gradient finite."""
        if not self.reported and self.steps_done() == self.step:
            self._report(None)

    def _name(self, module: torch.nn.Module) -> str:
        if self.names is None:
            self.names = self.module_names()
        return self.names.get(id(module), "")

    def _forward_hook(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        if not self.watching():
            return
        self.calls += 1
        tensors = _tensors(output, [])
        for position, tensor in enumerate(tensors):
            found = _nonfinite(tensor)
            if found is not None:
                inputs_bad = [index for index, t in enumerate(_tensors(inputs, [])) if _nonfinite(t)]
                self._report(
                    {
                        "module": self._name(module),
                        "module_class": type(module).__name__,
                        "where": "forward",
                        "tensor": position,
                        "inputs_nonfinite": inputs_bad,
                        **found,
                    }
                )
                return
        for position, tensor in enumerate(tensors):
            if tensor.requires_grad and tensor.grad_fn is not None:
                tensor.register_hook(self._gradient_hook(module, position))

    def _gradient_hook(self, module: torch.nn.Module, position: int) -> Any:
        def check(gradient: torch.Tensor) -> None:
            if not self.watching() or gradient is None:
                return
            found = _nonfinite(gradient)
            if found is not None:
                self._report(
                    {
                        "module": self._name(module),
                        "module_class": type(module).__name__,
                        "where": "gradient",
                        "tensor": position,
                        "inputs_nonfinite": [],
                        **found,
                    }
                )

        return check

    def _report(self, finding: dict[str, Any] | None) -> None:
        self.reported = True
        if self.handle is not None:
            self.handle.remove()
            self.handle = None
        self.channel.post({"kind": "probe", "step": self.step, "finding": finding, "calls": self.calls})
