"""The all-reduce as the step pipeline sees it: enter with a bucket, get the average back.

This module picks the algorithm (``allreduce`` = ring, tree or naive), casts the bucket to the
reduction dtype on the way in, and offers each algorithm's canonical sum (for the oracle's
reference) and its "waits on" answer (for the hang detector's flight recorder).
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

import numpy as np

from timetravel.scenarios.dp_training import collective, collective_level, naive, ring, tree
from timetravel.scenarios.dp_training.numerics import DTYPES
from timetravel.scenarios.dp_training.params import collective_level as at_collective_level
from timetravel.sim import Context

ALGORITHMS: dict[str, ModuleType] = {"ring": ring, "tree": tree, "naive": naive}
HANDLERS = {**ring.HANDLERS, **tree.HANDLERS, **naive.HANDLERS, **collective_level.HANDLERS}


def enter(state: dict[str, Any], ctx: Context, step: int, bucket: np.ndarray) -> bool:
    """Issue the all-reduce of ``step`` over ``bucket`` (cast to the reduction dtype).

    True when this rank's watchdog should watch the collective: always at the message level; at
    the collective level only for the first rank to enter (one timer per collective, not per rank).
    """
    config = ctx.world.config
    contribution = bucket.astype(DTYPES[config["reduce_dtype"]])
    collective.enter(state, ctx, step, contribution)
    if at_collective_level(config):
        return collective_level.start(state, ctx)
    ALGORITHMS[config["allreduce"]].start(state, ctx)
    return True


def canonical_sum(algorithm: str, contributions: np.ndarray) -> np.ndarray:
    """The algorithm's fault-free sum of a ranks x elements stack, bit for bit."""
    return ALGORITHMS[algorithm].canonical_sum(contributions)


def waits_on(algorithm: str, state: dict[str, Any]) -> list[str]:
    return ALGORITHMS[algorithm].waits_on(state)


def progress(algorithm: str, state: dict[str, Any]) -> int:
    """How far an active rank got in its collective (the algorithm's own count of parts taken)."""
    return ALGORITHMS[algorithm].progress(state)


def missing(algorithm: str, state: dict[str, Any]) -> list[list[Any]]:
    """``[peer, kind, part]`` for every message an active rank still waits on."""
    return ALGORITHMS[algorithm].missing(state)
