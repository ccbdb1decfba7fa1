"""Wall-clock measurement for benchmarks (outside the simulation path by construction)."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")
REPEATS_DEFAULT = 3


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
