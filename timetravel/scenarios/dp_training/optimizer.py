"""Optimizers as pure functions over plain state: SGD with momentum, and Adam.

An optimizer's state ("slots") is a plain dict of float32 arrays and Python numbers, so it lives in
the rank's node state, snapshots with it, and is what a checkpoint saves and an elastic restart
restores (or, under the planted bug ``restart_without_momentum``, forgets). ``step`` returns new
arrays and a new dict and changes nothing it was given.

Powers of Adam's betas are carried as running products rather than computed with ``**``: libm's
``pow`` is not guaranteed to round alike on every platform, a product of doubles is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from timetravel.scenarios.dp_training.numerics import COMPUTE_DTYPE

OPTIMIZERS = ("sgd", "adam")
ADAM_BETA1 = 0.9
ADAM_BETA2 = 0.999
ADAM_EPSILON = 1e-8

Slots = dict[str, Any]


def initial_slots(name: str, params: int) -> Slots:
    """Fresh optimizer state for ``params`` parameters (zeros, as after ``optimizer.__init__``)."""
    if name == "sgd":
        return {"momentum": np.zeros(params, dtype=COMPUTE_DTYPE)}
    if name == "adam":
        return {
            "first": np.zeros(params, dtype=COMPUTE_DTYPE),
            "second": np.zeros(params, dtype=COMPUTE_DTYPE),
            "beta1_power": 1.0,
            "beta2_power": 1.0,
        }
    raise ValueError(f"unknown optimizer {name!r} (known: {', '.join(OPTIMIZERS)})")


def sgd_step(
    weights: np.ndarray, gradient: np.ndarray, slots: Slots, lr: float, momentum: float
) -> tuple[np.ndarray, Slots]:
    """PyTorch's SGD with momentum: ``v = momentum * v + g``; ``w = w - lr * v``."""
    velocity = slots["momentum"] * COMPUTE_DTYPE.type(momentum) + gradient
    updated = weights - COMPUTE_DTYPE.type(lr) * velocity
    return updated, {"momentum": velocity}


def adam_step(weights: np.ndarray, gradient: np.ndarray, slots: Slots, lr: float) -> tuple[np.ndarray, Slots]:
    """Adam with bias correction (Kingma and Ba), all in float32 except the beta powers."""
    f32 = COMPUTE_DTYPE.type
    first = slots["first"] * f32(ADAM_BETA1) + gradient * f32(1.0 - ADAM_BETA1)
    second = slots["second"] * f32(ADAM_BETA2) + (gradient * gradient) * f32(1.0 - ADAM_BETA2)
    beta1_power = slots["beta1_power"] * ADAM_BETA1
    beta2_power = slots["beta2_power"] * ADAM_BETA2
    first_hat = first / f32(1.0 - beta1_power)
    second_hat = second / f32(1.0 - beta2_power)
    updated = weights - f32(lr) * first_hat / (np.sqrt(second_hat) + f32(ADAM_EPSILON))
    return updated, {"first": first, "second": second, "beta1_power": beta1_power, "beta2_power": beta2_power}


def step(
    name: str, weights: np.ndarray, gradient: np.ndarray, slots: Slots, lr: float, momentum: float
) -> tuple[np.ndarray, Slots]:
    """One update of float32 ``weights`` by float32 ``gradient``; returns new weights and slots."""
    if name == "sgd":
        return sgd_step(weights, gradient, slots, lr, momentum)
    if name == "adam":
        return adam_step(weights, gradient, slots, lr)
    raise ValueError(f"unknown optimizer {name!r} (known: {', '.join(OPTIMIZERS)})")
