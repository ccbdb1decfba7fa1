"""The toy model every rank trains: a two-layer MLP (ReLU, MSE) over one flat parameter vector.

Its size follows the config key ``params``: inputs and outputs are fixed (INPUTS, OUTPUTS) and the
hidden width is the largest that keeps the parameter count at or below ``params``. All parameters
live in one flat vector in the order W1, b1, W2, b2, so that a gradient *bucket* is one array that
the all-reduce cuts into chunks, as NCCL cuts a PyTorch DDP bucket.

The bucket a rank contributes is ``[gradient..., loss]``: the local loss rides along in the last
element so that the same all-reduce that averages the gradient also averages the loss, and every
rank knows the global loss without a second collective (a common fusion in real trainers).

All maths goes through :mod:`numerics` (fixed-order contractions), in float32.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from timetravel.scenarios.dp_training.numerics import COMPUTE_DTYPE, contract, sequential_sum

INPUTS = 16
OUTPUTS = 4
HIDDEN_MIN = 1


@dataclass(frozen=True)
class Layout:
    """Where each tensor sits in the flat parameter vector (offsets computed once)."""

    inputs: int
    hidden: int
    outputs: int
    w1_end: int = field(init=False)
    b1_end: int = field(init=False)
    w2_end: int = field(init=False)
    params: int = field(init=False)
    bucket_elements: int = field(init=False)
    """Gradient plus the loss element."""

    def __post_init__(self) -> None:
        w1_end = self.inputs * self.hidden
        b1_end = w1_end + self.hidden
        w2_end = b1_end + self.hidden * self.outputs
        object.__setattr__(self, "w1_end", w1_end)
        object.__setattr__(self, "b1_end", b1_end)
        object.__setattr__(self, "w2_end", w2_end)
        object.__setattr__(self, "params", w2_end + self.outputs)
        object.__setattr__(self, "bucket_elements", w2_end + self.outputs + 1)

    def split(self, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Views of W1 (inputs x hidden), b1, W2 (hidden x outputs), b2 inside ``flat``."""
        w1_end = self.w1_end
        b1_end = self.b1_end
        w2_end = self.w2_end
        return (
            flat[:w1_end].reshape(self.inputs, self.hidden),
            flat[w1_end:b1_end],
            flat[b1_end:w2_end].reshape(self.hidden, self.outputs),
            flat[w2_end : self.params],
        )


@functools.lru_cache(maxsize=64)
def layout_for(params: int) -> Layout:
    """The widest MLP with at most ``params`` parameters (at least one hidden unit)."""
    hidden = max(HIDDEN_MIN, (params - OUTPUTS) // (INPUTS + 1 + OUTPUTS))
    return Layout(INPUTS, hidden, OUTPUTS)


def forward(weights: np.ndarray, inputs: np.ndarray, layout: Layout) -> tuple[np.ndarray, np.ndarray]:
    """Pre-activations of the hidden layer and the outputs, for a batch (batch x inputs)."""
    w1, b1, w2, b2 = layout.split(weights)
    hidden_pre = contract(inputs, w1) + b1
    hidden = np.maximum(hidden_pre, COMPUTE_DTYPE.type(0))
    return hidden_pre, contract(hidden, w2) + b2


def loss_and_gradient(
    weights: np.ndarray, inputs: np.ndarray, targets: np.ndarray, layout: Layout
) -> tuple[np.ndarray, np.ndarray]:
    """Mean squared error of one batch and its gradient, both float32, in a fixed order.

    Returns ``(loss, gradient)`` where loss is a float32 0-d array and gradient a flat float32
    vector laid out like ``weights``.
    """
    weights = weights.astype(COMPUTE_DTYPE, copy=False)
    w1, b1, w2, b2 = layout.split(weights)
    hidden_pre = contract(inputs, w1) + b1
    hidden = np.maximum(hidden_pre, COMPUTE_DTYPE.type(0))
    outputs = contract(hidden, w2) + b2
    difference = outputs - targets
    count = COMPUTE_DTYPE.type(difference.size)
    loss = sequential_sum((difference * difference).reshape(-1)) / count
    output_gradient = difference * (COMPUTE_DTYPE.type(2) / count)
    gradient = np.empty(layout.params, dtype=COMPUTE_DTYPE)
    grad_w1, grad_b1, grad_w2, grad_b2 = layout.split(gradient)
    grad_w2[...] = contract(hidden.T, output_gradient)
    grad_b2[...] = sequential_sum(output_gradient)
    hidden_gradient = contract(output_gradient, w2.T) * (hidden_pre > 0)
    grad_w1[...] = contract(inputs.T, hidden_gradient)
    grad_b1[...] = sequential_sum(hidden_gradient)
    return np.asarray(loss, dtype=COMPUTE_DTYPE), gradient


def local_bucket(
    weights: np.ndarray,
    inputs: np.ndarray,
    targets: np.ndarray,
    layout: Layout,
    dtype: np.dtype,
    loss_scale: float = 1.0,
) -> np.ndarray:
    """The bucket a rank contributes: ``[gradient * loss_scale..., loss]`` in the model dtype.

    ``loss_scale`` is mixed-precision training's loss scaling: the backward pass differentiates
    the scaled loss, so the gradient buffer holds scaled values, and the average divides the scale
    out again (:func:`update.average`). A power of two changes no bit of the trained weights; it
    changes the magnitudes in the gradient buffer, and so what a flipped exponent bit does there.

    Weights that went bad (a planted bug let a corrupted update through) overflow here; IEEE gives
    inf and nan the same way on every CPU, and the detectors report them, so numpy's warnings
    are silenced rather than printed from inside the simulation.
    """
    with np.errstate(over="ignore", invalid="ignore"):
        loss, gradient = loss_and_gradient(weights, inputs, targets, layout)
    bucket = np.empty(layout.bucket_elements, dtype=dtype)
    bucket[: layout.params] = gradient if loss_scale == 1.0 else gradient * COMPUTE_DTYPE.type(loss_scale)
    bucket[layout.params] = loss
    return bucket


BATCH_TEMPORARY_ELEMENTS_MAX = 1 << 20
"""Elements of the largest temporary of a batched pass (rows are taken in groups to stay below):
4 MiB of float32. Rank-last, larger groups are faster (10,000 ranks of 256 parameters: 0.051 s a
pass at 1 << 18, 0.035 s at 1 << 20, no faster beyond)."""


def _batched_contract(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``left[..., r] @ right[..., r]`` for every rank r (M x K x R times K x N x R -> M x N x R),
    summed over k = 0, 1, ... in that order.

    The same products and the same left-to-right running sum as :func:`numerics.contract` (whose
    sum over the stack of products is ``total = p0; total += p1; ...`` by definition), with the
    rank as one more element-wise axis, so every rank gets the bits it would get alone. The rank
    axis is the last, contiguous one: each product is a broadcast over M and N of two contiguous
    runs of R values, which numpy's loops take whole. (With the rank first, the innermost axis was
    N, a handful of elements, and numpy copied both operands through its buffers for every
    product: ~4x the time of the same additions rank-last.) The products are formed one k at a
    time, so no K-fold temporary is built.
    """
    total = left[:, 0, None, :] * right[None, 0, :, :]
    for k in range(1, left.shape[1]):
        total += left[:, k, None, :] * right[None, k, :, :]
    return total


def batched_loss_and_gradient(
    weights: np.ndarray, inputs: np.ndarray, targets: np.ndarray, layout: Layout
) -> tuple[np.ndarray, np.ndarray]:
    """:func:`loss_and_gradient` for R replicas at once: weights R x params, inputs R x batch x
    inputs, targets R x batch x outputs; returns losses (R) and gradients (R x params).

    Computed rank-last (every array below ends in the rank axis, see :func:`_batched_contract`):
    element for element the operations of :func:`loss_and_gradient`, in its order."""
    rows = weights.shape[0]
    batch = inputs.shape[1]
    weights = np.ascontiguousarray(weights.astype(COMPUTE_DTYPE, copy=False).T)
    inputs = np.ascontiguousarray(inputs.transpose(1, 2, 0))
    targets = np.ascontiguousarray(targets.transpose(1, 2, 0))
    w1 = weights[: layout.w1_end].reshape(layout.inputs, layout.hidden, rows)
    b1 = weights[layout.w1_end : layout.b1_end]
    w2 = weights[layout.b1_end : layout.w2_end].reshape(layout.hidden, layout.outputs, rows)
    b2 = weights[layout.w2_end : layout.params]
    hidden_pre = _batched_contract(inputs, w1) + b1[None, :, :]
    hidden = np.maximum(hidden_pre, COMPUTE_DTYPE.type(0))
    outputs = _batched_contract(hidden, w2) + b2[None, :, :]
    difference = outputs - targets
    count = COMPUTE_DTYPE.type(batch * layout.outputs)
    loss = sequential_sum((difference * difference).reshape(-1, rows)) / count
    output_gradient = difference * (COMPUTE_DTYPE.type(2) / count)
    gradient = np.empty((layout.params, rows), dtype=COMPUTE_DTYPE)
    gradient[layout.b1_end : layout.w2_end] = _batched_contract(
        hidden.transpose(1, 0, 2), output_gradient
    ).reshape(-1, rows)
    gradient[layout.w2_end : layout.params] = sequential_sum(output_gradient)
    hidden_gradient = _batched_contract(output_gradient, w2.transpose(1, 0, 2)) * (hidden_pre > 0)
    gradient[: layout.w1_end] = _batched_contract(inputs.transpose(1, 0, 2), hidden_gradient).reshape(
        -1, rows
    )
    gradient[layout.w1_end : layout.b1_end] = sequential_sum(hidden_gradient)
    return loss, gradient.T


def batched_buckets(
    weights: np.ndarray,
    inputs: np.ndarray,
    targets: np.ndarray,
    layout: Layout,
    dtype: np.dtype,
    loss_scale: float = 1.0,
) -> np.ndarray:
    """:func:`local_bucket` for R replicas at once (R x bucket elements), bit for bit the same rows.

    Rows are computed in groups whose temporaries stay below BATCH_TEMPORARY_ELEMENTS_MAX.
    """
    rows = weights.shape[0]
    batch = inputs.shape[1]
    per_row = batch * layout.hidden * max(layout.inputs, layout.outputs)
    group = max(1, BATCH_TEMPORARY_ELEMENTS_MAX // max(1, per_row))
    buckets = np.empty((rows, layout.bucket_elements), dtype=dtype)
    scale = COMPUTE_DTYPE.type(loss_scale)
    for low in range(0, rows, group):
        high = min(rows, low + group)
        with np.errstate(over="ignore", invalid="ignore"):
            loss, gradient = batched_loss_and_gradient(
                weights[low:high], inputs[low:high], targets[low:high], layout
            )
            buckets[low:high, : layout.params] = gradient if loss_scale == 1.0 else gradient * scale
        buckets[low:high, layout.params] = loss
    return buckets
