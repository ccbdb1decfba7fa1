"""The loss without touching the script: the scalar a rank calls ``.backward()`` on, as metric ``loss``.

A training script need not log its loss for the debugger to show it: every scalar tensor on
which ``loss.backward()`` or ``torch.autograd.backward(loss)`` is called (one element, the
implicit gradient 1) is read once backward returned — ``float(loss.detach())``, which reads the
value and changes neither the tensor, its graph nor any gradient — and the sum of those read
since the previous optimizer step is the step's ``loss`` (a plain script calls backward once a
step; with gradient accumulation, ``(loss / k).backward()`` k times sums to the step's mean). A
tensor that ``GradScaler.scale(loss)`` returned counts as the unscaled ``loss``.

When is it sent: not at the optimizer step itself but just before the rank's next blocking
message (a collective call, a wait, its exit), stamped with the step's logical time. In between
the script may log a metric named ``loss`` itself (``timetravel.torch.metric``, SummaryWriter,
wandb), typically right after ``optimizer.step()``: **the script's own ``loss`` wins**. From the
first ``loss`` the script logs, the rank sends only the script's (the captured one of that step
is dropped), so one rank's ``loss`` series never mixes the two. A step with no backward before
it (the optimizer stepped on gradients made another way) records no captured loss, nor does a
backward that no optimizer step follows.

Nothing here touches the World: the sender is a function the rank setup gives (it posts a
``metric`` message on the rank's channel).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from typing import Any

from timetravel.torch.rank.env.patching import Installation, Patches, when_imported

LOSS_METRIC = "loss"
UNSCALED_ATTRIBUTE = "_timetravel_unscaled"
"""Set on the tensor GradScaler.scale returns: the loss it scaled (detached)."""

Send = Callable[[str, float, int, int], None]
"""``send(name, value, step, t_ns)``: post one metric stamped with logical time ``t_ns``."""


class LossCapture:
    """The rank's captured loss between backward, the optimizer step and the next blocking call."""

    def __init__(self, send: Send, clock: Callable[[], int]) -> None:
        self.send = send
        self.clock = clock
        self.accumulated: float | None = None
        self.pending: tuple[float, int, int] | None = None
        """``(value, step, t_ns)`` of the last optimizer step, until the next blocking message."""
        self.script_logs_loss = False
        self.depth = 0
        """Backward calls in progress (only the outermost one is a loss)."""

    def backward_done(self, tensors: Any, grad_tensors: Any) -> None:
        """After ``torch.autograd.backward(tensors, grad_tensors)`` returned: add the loss it was of."""
        if self.script_logs_loss or grad_tensors is not None:
            return
        if isinstance(tensors, (list, tuple)):
            if len(tensors) != 1:
                return
            tensors = tensors[0]
        value = loss_value(tensors)
        if value is not None:
            self.accumulated = value if self.accumulated is None else self.accumulated + value

    def step_done(self, step: int) -> None:
        """After an optimizer step: its loss waits for the next blocking message (see the docstring)."""
        if self.accumulated is not None and not self.script_logs_loss:
            self.pending = (self.accumulated, step, self.clock())
        self.accumulated = None

    def script_metric(self, name: str) -> None:
        """The script logged metric ``name``: a ``loss`` of its own replaces the captured one."""
        if name == LOSS_METRIC:
            self.script_logs_loss = True
            self.pending = None
            self.accumulated = None

    def flush(self) -> None:
        """Before a blocking message: send the last step's captured loss, if nothing replaced it."""
        pending, self.pending = self.pending, None
        if pending is not None and not self.script_logs_loss:
            value, step, t_ns = pending
            self.send(LOSS_METRIC, value, step, t_ns)


def loss_value(tensor: Any) -> float | None:
    """The value of a one-element tensor (the loss GradScaler scaled, for a scaled one); else None."""
    import torch

    if not isinstance(tensor, torch.Tensor) or tensor.numel() != 1:
        return None
    source = getattr(tensor, UNSCALED_ATTRIBUTE, tensor)
    if not source.dtype.is_floating_point:
        return None
    return float(source.detach().reshape(()))


def install_loss_capture(capture: LossCapture) -> Installation:
    """Wrap ``torch.autograd.backward`` (``Tensor.backward`` calls it) and ``GradScaler.scale``."""
    import torch.autograd

    patches = Patches()

    def wrap_backward(original: Any) -> Any:
        @functools.wraps(original)
        def backward(tensors: Any, grad_tensors: Any = None, *args: Any, **kwargs: Any) -> Any:
            # a backward called inside a backward (reentrant checkpointing) is not a loss of its own
            capture.depth += 1
            try:
                result = original(tensors, grad_tensors, *args, **kwargs)
            finally:
                capture.depth -= 1
            if capture.depth == 0:
                capture.backward_done(tensors, grad_tensors)
            return result

        return backward

    patches.wrap(torch.autograd, "backward", wrap_backward)
    when_imported(patches, "torch.amp.grad_scaler", lambda module: _patch_scale(patches, module))
    return Installation("loss", patches, capture)


def _patch_scale(patches: Patches, module: Any) -> None:
    def wrap_scale(original: Any) -> Any:
        def scale(self: Any, outputs: Any) -> Any:
            scaled = original(self, outputs)
            if scaled is not outputs and getattr(scaled, "numel", lambda: 0)() == 1:
                # a tensor subclass refusing attributes: its scaled value is recorded
                with contextlib.suppress(AttributeError, TypeError):
                    setattr(scaled, UNSCALED_ATTRIBUTE, outputs.detach())
            return scaled

        return scale

    patches.wrap(module.GradScaler, "scale", wrap_scale)
