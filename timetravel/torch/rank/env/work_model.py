"""The ``flops`` compute model: a rank's compute time from the work its tensors do, not a fixed charge.

Under the default model (``compute_model=fixed``) every interval between two calls to the World
costs ``compute_interval`` whatever the script computed, so a step of a 1B-parameter model costs as
little simulated time as a step of a toy. ``compute_model=flops`` charges, on top of that interval,
the floating-point operations the rank ran since its last call, at ``compute_flops_per_s``:

* **counted**: the matrix products and convolutions, which dominate a training step's work —
  ``F.linear``, ``matmul`` / ``@``, ``mm``, ``bmm``, ``addmm``, ``baddbmm`` (functions and
  ``Tensor`` methods), ``conv1d/2d/3d`` and their transposes, and
  ``scaled_dot_product_attention``; each at the textbook count (2 per multiply-add, the same
  formulas as ``torch.utils.flop_counter``). Element-wise ops, reductions and optimizer updates are
  not counted: they are bandwidth-bound and small beside the products (the model's documented error);
* **backward**: a counted product whose inputs require grad owes twice its forward flops to the
  backward pass (one product for the input's gradient, one for the weight's). The debt is charged
  when ``backward()`` / ``torch.autograd.backward`` / ``torch.autograd.grad`` is called, as one block:
  the collectives DDP issues during backward therefore start after the whole backward's compute —
  the overlap of compute and communication is not modelled.

The counts depend only on tensor shapes, so the charge is the same on every run (determinism); the
rank hands it to the World as ``work_ns`` with its next call (``Channel.post``), and the World adds
it to the interval, where a ``slow`` fault multiplies it like the rest of the rank's compute.

The price: a :class:`~torch.overrides.TorchFunctionMode` is active in the rank, so every torch call
goes through one Python function (docs/torch.md has the measured cost). Integer arithmetic only: the
nanoseconds are ``flops * 10**9 // flops_per_s``, the remainder carried to the next charge.
"""

from __future__ import annotations

import math
from typing import Any

from timetravel.torch.protocol.limits import COMPUTE_FLOPS_PER_S_DEFAULT
from timetravel.torch.rank.env.patching import Installation, Patches

NS_PER_SECOND = 1_000_000_000
BACKWARD_FLOPS_PER_FORWARD_FLOP = 2


class WorkMeter:
    """The flops a rank ran since its last call to the World, and the backward pass it owes."""

    __slots__ = ("_remainder", "backward_flops_owed", "flops_pending", "flops_per_s", "flops_total")

    def __init__(self, flops_per_s: int = COMPUTE_FLOPS_PER_S_DEFAULT) -> None:
        if isinstance(flops_per_s, bool) or not isinstance(flops_per_s, int) or flops_per_s <= 0:
            raise ValueError(f"flops_per_s must be a positive integer, got {flops_per_s!r}")
        self.flops_per_s = flops_per_s
        self.flops_pending = 0
        self.backward_flops_owed = 0
        self.flops_total = 0
        self._remainder = 0

    def forward(self, flops: int, needs_backward: bool) -> None:
        self.flops_pending += flops
        self.flops_total += flops
        if needs_backward:
            self.backward_flops_owed += BACKWARD_FLOPS_PER_FORWARD_FLOP * flops

    def backward(self) -> None:
        """A backward pass begins: the debt of the products recorded since the last one falls due."""
        self.flops_pending += self.backward_flops_owed
        self.flops_total += self.backward_flops_owed
        self.backward_flops_owed = 0

    def take_ns(self) -> int:
        """The compute time of the pending flops in ns (the remainder carried); the count restarts."""
        whole_ns, self._remainder = divmod(
            self.flops_pending * NS_PER_SECOND + self._remainder, self.flops_per_s
        )
        self.flops_pending = 0
        return whole_ns


def _numel(shape: Any) -> int:
    return math.prod(int(size) for size in shape)


def matmul_flops(left: Any, right: Any) -> int:
    """``left @ right`` with torch.matmul's rules: 1-d operands promoted, batch dims broadcast."""
    import torch

    left_shape, right_shape = tuple(left.shape), tuple(right.shape)
    if not left_shape or not right_shape:
        return 0
    rows = left_shape[-2] if len(left_shape) >= 2 else 1
    inner = left_shape[-1]
    columns = right_shape[-1] if len(right_shape) >= 2 else 1
    batch = _numel(torch.broadcast_shapes(left_shape[:-2], right_shape[:-2]))
    return 2 * batch * rows * inner * columns


def _linear(input: Any, weight: Any, *_: Any, **__: Any) -> int:
    if weight.dim() != 2 or input.dim() == 0:
        return 0
    return 2 * _numel(input.shape) * int(weight.shape[0])


def _matmul(left: Any, right: Any, *_: Any, **__: Any) -> int:
    return matmul_flops(left, right)


def _reversed_matmul(right: Any, left: Any, *_: Any, **__: Any) -> int:
    return matmul_flops(left, right)


def _added_matmul(_input: Any, left: Any, right: Any, *_: Any, **__: Any) -> int:
    return matmul_flops(left, right)


def _attention(query: Any, key: Any, value: Any, *_: Any, **__: Any) -> int:
    if query.dim() < 2:
        return 0
    positions = _numel(query.shape[:-1]) * int(key.shape[-2])
    return 2 * positions * (int(query.shape[-1]) + int(value.shape[-1]))


def _convolution_from_output(weight_dim: int) -> Any:
    def flops(output: Any, _input: Any, weight: Any, *_: Any, **__: Any) -> int:
        return 2 * _numel(output.shape) * _numel(weight.shape[1:weight_dim])

    return flops


def _transposed_convolution(input: Any, weight: Any, *_: Any, **__: Any) -> int:
    return 2 * _numel(input.shape) * _numel(weight.shape[1:])


def counted_functions() -> tuple[dict[Any, Any], dict[Any, Any]]:
    """(flops from the arguments, flops from the output and the arguments), by torch function."""
    import torch
    import torch.nn.functional as functional

    from_arguments: dict[Any, Any] = {
        functional.linear: _linear,
        functional.scaled_dot_product_attention: _attention,
    }
    for owner in (torch, torch.Tensor):
        from_arguments.update({owner.matmul: _matmul, owner.mm: _matmul, owner.bmm: _matmul})
        from_arguments.update({owner.addmm: _added_matmul, owner.baddbmm: _added_matmul})
    from_arguments[torch.Tensor.__matmul__] = _matmul
    from_arguments[torch.Tensor.__rmatmul__] = _reversed_matmul
    for transposed in (functional.conv_transpose1d, functional.conv_transpose2d, functional.conv_transpose3d):
        from_arguments[transposed] = _transposed_convolution
    from_output = {
        convolution: _convolution_from_output(weight_dim)
        for convolution, weight_dim in (
            (functional.conv1d, 3),
            (functional.conv2d, 4),
            (functional.conv3d, 5),
        )
    }
    return from_arguments, from_output


def _needs_backward(arguments: tuple[Any, ...]) -> bool:
    import torch

    return torch.is_grad_enabled() and any(
        getattr(argument, "requires_grad", False) for argument in arguments
    )


def make_work_mode(meter: WorkMeter) -> Any:
    """The TorchFunctionMode that feeds ``meter`` (see the module docstring)."""
    import torch
    from torch import autograd
    from torch.overrides import TorchFunctionMode

    from_arguments, from_output = counted_functions()
    backward_functions = {torch.Tensor.backward, autograd.backward, autograd.grad}

    class WorkCounter(TorchFunctionMode):
        """Counts the flops of the products a rank runs; charges the backward debt at backward()."""

        def __torch_function__(
            self, func: Any, types: Any, args: tuple[Any, ...] = (), kwargs: dict[str, Any] | None = None
        ) -> Any:
            kwargs = kwargs or {}
            count = from_arguments.get(func)
            if count is not None:
                meter.forward(count(*args, **kwargs), _needs_backward(args))
                return func(*args, **kwargs)
            count = from_output.get(func)
            if count is not None:
                output = func(*args, **kwargs)
                meter.forward(count(output, *args, **kwargs), _needs_backward(args))
                return output
            if func in backward_functions or func is autograd.backward or func is autograd.grad:
                meter.backward()  # also when another installation wrapped them after this mode began
            return func(*args, **kwargs)

    return WorkCounter()


def install_work_model(meter: WorkMeter) -> Installation:
    """Enter the counting mode for the rest of the rank's life (a test may uninstall it)."""
    patches = Patches()
    mode = make_work_mode(meter)
    mode.__enter__()
    patches.on_undo(lambda: mode.__exit__(None, None, None))
    return Installation("work_model", patches, meter)
