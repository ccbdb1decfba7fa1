"""Wall-clock measurement for benchmarks (outside the simulation path by construction)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
REPEATS_DEFAULT = 3


def timed(function: Callable[[], T]) -> tuple[float, T]:
    """One run of ``function``: its wall time in seconds and its result."""
    start = time.perf_counter()
    result = function()
    return time.perf_counter() - start, result


def percentile(values: list[float], fraction: float) -> float:
    """The ``fraction`` quantile by rank, rounding up: with 20 values p95 is the slowest."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def best_of(function: Callable[[], T], repeats: int = REPEATS_DEFAULT) -> tuple[float, T]:
    """Run ``function`` ``repeats`` times; return the shortest wall time and the last result."""
    best = float("inf")
    result: T
    for _ in range(repeats):
        gc.collect()
        start = time.perf_counter()
        result = function()
        best = min(best, time.perf_counter() - start)
    return best, result


def alternating_best(
    first: Callable[[], object], second: Callable[[], object], rounds: int = REPEATS_DEFAULT
) -> tuple[float, float]:
    """The shortest wall time of each of two functions run in alternation (first, second, first, …)
    after one unmeasured round of both: a ratio of the two then sees the same machine load and the
    same warm caches on both sides, which two blocks of ``best_of`` one after the other do not."""
    first()
    second()
    best_first = best_second = float("inf")
    for _ in range(rounds):
        for index, function in enumerate((first, second)):
            gc.collect()
            start = time.perf_counter()
            function()
            took = time.perf_counter() - start
            if index == 0:
                best_first = min(best_first, took)
            else:
                best_second = min(best_second, took)
    return best_first, best_second
