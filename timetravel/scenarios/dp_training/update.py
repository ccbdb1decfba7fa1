"""The maths after the all-reduce, shared by the simulated ranks and the oracle's reference.

Keeping one implementation is what makes the oracle meaningful: a fault-free simulated run and the
reference apply the very same functions to the very same bits, so any difference is a fault's (or
a bug's) doing, never a second implementation's.

The step guard lives here: the update is skipped when the *all-reduced* gradient norm is
non-finite or above ``grad_skip_norm``, or the all-reduced loss is non-finite. Every rank sees the
same all-reduced bucket, so every rank skips alike and the replicas stay identical.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from timetravel.scenarios.dp_training import optimizer
from timetravel.scenarios.dp_training.numerics import COMPUTE_DTYPE, DTYPES, norm


@dataclass(frozen=True)
class Verdict:
    """What the guard saw and decided for one step."""

    loss: float
    grad_norm: float
    skipped: bool


def average(reduced: np.ndarray, ranks: int, dtype_name: str, loss_scale: float = 1.0) -> np.ndarray:
    """The all-reduced sum divided by N (and the gradient by the loss scale), in the model dtype."""
    mean = reduced.astype(COMPUTE_DTYPE) / COMPUTE_DTYPE.type(ranks)
    if loss_scale != 1.0:
        mean[:-1] /= COMPUTE_DTYPE.type(loss_scale)
    return mean.astype(DTYPES[dtype_name])


def inspect(bucket: np.ndarray, grad_skip_norm: float, loss_scale: float = 1.0) -> Verdict:
    """Norm (of the unscaled gradient) and loss of a bucket, and whether the guard would skip it."""
    loss = float(bucket[-1])
    grad_norm = norm(bucket[:-1]) / loss_scale
    skipped = not (math.isfinite(grad_norm) and math.isfinite(loss)) or grad_norm > grad_skip_norm
    return Verdict(loss, grad_norm, skipped)


def apply(
    weights: np.ndarray, slots: dict[str, Any], bucket: np.ndarray, config: dict[str, Any], skip: bool
) -> tuple[np.ndarray, dict[str, Any]]:
    """New weights (model dtype) and optimizer slots after one step, or the old ones when skipped."""
    if skip:
        return weights, slots
    gradient = bucket[:-1].astype(COMPUTE_DTYPE)
    updated, slots = optimizer.step(
        config["optimizer"],
        weights.astype(COMPUTE_DTYPE),
        gradient,
        slots,
        config["lr"],
        config["momentum"],
    )
    return updated.astype(DTYPES[config["dtype"]]), slots
