"""Initial weights and each rank's shard of a synthetic regression dataset, all from ``data_seed``.

This is data, not a runtime choice: it is drawn once, at build time, from numpy's PCG64 generator
seeded with ``data_seed`` (a config key, apart from the simulation seed), so that two simulation
seeds time and fault the same maths and their final weights are comparable bit for bit. Only
``Generator.random`` is used (53 random bits scaled by 2**-53, exact on every platform); normal
variates would go through log/exp, which differ between libm builds.

The targets come from a fixed random *teacher* network (itself drawn from ``data_seed``) plus a
little noise, so the loss has something to learn and a floor above zero.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from timetravel.scenarios.dp_training.model import Layout
from timetravel.scenarios.dp_training.numerics import COMPUTE_DTYPE, contract

TEACHER_HIDDEN = 8
NOISE_SCALE = 0.05
TARGET_SCALE = 0.5


@dataclass(frozen=True)
class Dataset:
    """Initial flat weights (float64, cast by the caller) and per-rank shards."""

    initial_weights: np.ndarray
    inputs: list[np.ndarray]
    """Per rank: batches x batch x inputs, float32."""
    targets: list[np.ndarray]
    """Per rank: batches x batch x outputs, float32."""


def _uniform(generator: np.random.Generator, shape: tuple[int, ...], bound: float) -> np.ndarray:
    return (generator.random(shape) * 2.0 - 1.0) * bound


def initial_weights(generator: np.random.Generator, layout: Layout) -> np.ndarray:
    """He-uniform weights (bound sqrt(6 / fan_in)) and zero biases, as one flat float64 vector."""
    flat = np.zeros(layout.params, dtype=np.float64)
    w1, _, w2, _ = layout.split(flat)
    w1[...] = _uniform(generator, w1.shape, math.sqrt(6.0 / layout.inputs))
    w2[...] = _uniform(generator, w2.shape, math.sqrt(6.0 / layout.hidden))
    return flat


def build_dataset(data_seed: int, ranks: int, batch: int, batches: int, layout: Layout) -> Dataset:
    """Everything that ``data_seed`` decides, drawn in a fixed order: weights, teacher, shards."""
    generator = np.random.Generator(np.random.PCG64(data_seed))
    weights = initial_weights(generator, layout)
    teacher_in = _uniform(generator, (layout.inputs, TEACHER_HIDDEN), 1.0).astype(COMPUTE_DTYPE)
    teacher_out = _uniform(generator, (TEACHER_HIDDEN, layout.outputs), TARGET_SCALE).astype(COMPUTE_DTYPE)
    inputs = []
    targets = []
    for _rank in range(ranks):
        shard = _uniform(generator, (batches * batch, layout.inputs), 1.0).astype(COMPUTE_DTYPE)
        noise = _uniform(generator, (batches * batch, layout.outputs), NOISE_SCALE).astype(COMPUTE_DTYPE)
        hidden = np.maximum(contract(shard, teacher_in), COMPUTE_DTYPE.type(0))
        target = contract(hidden, teacher_out) + noise
        inputs.append(shard.reshape(batches, batch, layout.inputs))
        targets.append(target.reshape(batches, batch, layout.outputs))
    return Dataset(weights, inputs, targets)
