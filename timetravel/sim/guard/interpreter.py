"""Interpreter hooks that run inside a handler but are not part of it: the garbage collector's.

A collection can start at any allocation, so it runs inside whichever handler happened to
allocate, at a moment no seed decides. Whatever runs during it — ``gc.callbacks`` (a profiler's,
a framework's memory monitor) and the finalizers of the cyclic garbage it frees (``__del__``,
``weakref.finalize`` callbacks) — is not the simulated node's code. Guarding it would be wrong both
ways: refusing a clock read there fails a correct run for a reason outside the simulation
(``time.perf_counter called ... in gc_callback``), and virtualizing a random draw there would take
a choice at a moment that differs from run to run, shifting the node's choice stream.

So the guard keeps two callbacks of its own at the two ends of ``gc.callbacks``: the first one
called at a collection's ``start`` switches this thread's guard off (the rest of the collection
sees the real functions), the last one called at its ``stop`` switches it back. :func:`keep_first_and_last`
puts them back at the ends if other code registered callbacks since (called at every guard
activation: a few list reads).
"""

from __future__ import annotations

import gc
import threading
from typing import Any

from timetravel.sim.guard.state import MODE_OFF, activate, deactivate


class _Saved(threading.local):
    """Per-thread stack of guard slots saved at collection starts (a collection runs on one thread)."""

    def __init__(self) -> None:
        self.slots: list[tuple[Any, bool]] = []


_saved = _Saved()


def _collection_starts(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _saved.slots.append(activate(None, MODE_OFF))


def _collection_stops(phase: str, info: dict[str, Any]) -> None:
    if phase == "stop" and _saved.slots:
        deactivate(_saved.slots.pop())


def keep_first_and_last() -> None:
    """Make the guard's collection callbacks the first and the last of ``gc.callbacks``."""
    callbacks = gc.callbacks
    if callbacks and callbacks[0] is _collection_starts and callbacks[-1] is _collection_stops:
        return
    for callback in (_collection_starts, _collection_stops):
        while callback in callbacks:
            callbacks.remove(callback)
    callbacks.insert(0, _collection_starts)
    callbacks.append(_collection_stops)
