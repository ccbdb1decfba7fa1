"""The oracle's reference: the fault-free trajectory, computed directly from the maths.

With canonical reduction and no faults, the weights after every step are a pure function of the
config (model, data_seed, ranks, algorithm, dtypes, optimizer): timing cannot change them. So the
reference does not simulate at all. It computes every rank's bucket from the shared weights, sums
the stack with the algorithm's own canonical order (:func:`allreduce.canonical_sum`, the same
element-by-element additions the messages perform), and applies :mod:`update`, exactly as the
ranks do. A fault-free simulated run matches it bit for bit (a test holds it to that), so a
survivable fault that changes any bit is caught at the step where it happened.

The result is cached per config (``REFERENCE_CACHE_MAX`` entries), so a seed sweep computes it once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numpy as np

from timetravel.scenarios.dp_training import allreduce, update
from timetravel.scenarios.dp_training.data import build_dataset
from timetravel.scenarios.dp_training.detectors import weights_digest
from timetravel.scenarios.dp_training.model import layout_for, local_bucket
from timetravel.scenarios.dp_training.numerics import DTYPES
from timetravel.scenarios.dp_training.optimizer import initial_slots

REFERENCE_CACHE_MAX = 16
REFERENCE_KEYS = (
    "ranks",
    "steps",
    "params",
    "dtype",
    "reduce_dtype",
    "allreduce",
    "data_seed",
    "grad_skip_norm",
    "loss_scale",
    "optimizer",
    "lr",
    "momentum",
    "batch",
    "batches_per_rank",
)


@dataclass(frozen=True)
class Trajectory:
    """Digest of the weights after each step (index 0 is step 1), and the final figures."""

    digests: tuple[int, ...]
    losses: tuple[float, ...]
    skipped_steps: int


def reference(config: dict[str, Any]) -> Trajectory:
    """The fault-free trajectory for ``config`` (cached)."""
    return _cached(tuple(config[key] for key in REFERENCE_KEYS))


@functools.lru_cache(maxsize=REFERENCE_CACHE_MAX)
def _cached(values: tuple[Any, ...]) -> Trajectory:
    return compute(dict(zip(REFERENCE_KEYS, values, strict=True)))


def compute(config: dict[str, Any]) -> Trajectory:
    """Run the maths of ``config['steps']`` fault-free steps (no cache)."""
    layout = layout_for(config["params"])
    ranks = config["ranks"]
    dtype = DTYPES[config["dtype"]]
    reduce_dtype = DTYPES[config["reduce_dtype"]]
    dataset = build_dataset(config["data_seed"], ranks, config["batch"], config["batches_per_rank"], layout)
    weights = dataset.initial_weights.astype(dtype)
    slots = initial_slots(config["optimizer"], layout.params)
    digests = []
    losses = []
    skipped = 0
    for step in range(1, config["steps"] + 1):
        batch = (step - 1) % config["batches_per_rank"]
        stack = np.stack(
            [
                local_bucket(
                    weights,
                    dataset.inputs[rank][batch],
                    dataset.targets[rank][batch],
                    layout,
                    dtype,
                    config["loss_scale"],
                )
                for rank in range(ranks)
            ]
        ).astype(reduce_dtype)
        total = allreduce.canonical_sum(config["allreduce"], stack)
        bucket = update.average(total, ranks, config["dtype"], config["loss_scale"])
        verdict = update.inspect(bucket, config["grad_skip_norm"])
        weights, slots = update.apply(weights, slots, bucket, config, verdict.skipped)
        skipped += verdict.skipped
        digests.append(weights_digest(weights))
        losses.append(verdict.loss)
    return Trajectory(tuple(digests), tuple(losses), skipped)
