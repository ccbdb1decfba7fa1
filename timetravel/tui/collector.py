"""Full garbage collections while the user is idle, never in the middle of a gesture.

CPython's cyclic collector has three generations; a collection of the oldest one walks every
tracked object and holds every thread (the GIL) while it does. In the debugger that is a world
or two, a few decoded event batches and Textual's widgets: 100,000–300,000 objects, which took
60–250 ms on a loaded 2-core machine — a frozen frame whenever it struck, typically right after
a seek had allocated a new view. So while the App runs:

* ``gc.freeze()`` at start moves everything alive then (modules, Textual, the open recording)
  out of the collector's reach for good;
* the oldest generation is never collected automatically (its threshold is set out of reach);
  the two young generations still are (they walk only what was allocated recently, so they
  are short, and they reclaim most cyclic garbage, which dies young);
* :meth:`IdleCollector.tick`, called about once a second, runs a full collection once the App
  has been idle (no job running or waiting, no key or mouse) for ``IDLE_COLLECT_S`` since the
  last activity. A key pressed during it waits for it; nothing the user asked for does.

:meth:`IdleCollector.stop` puts the thresholds back and unfreezes. Wall-clock time is read here (a front end),
never in the simulation path.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable

IDLE_COLLECT_S = 2.0
"""Idle time after the last activity before the full collection runs."""
FULL_COLLECTION_DEFERRED = 1_000_000_000
"""The oldest generation's threshold while the App runs: out of reach, so never automatic."""


class IdleCollector:
    """See the module docstring."""

    def __init__(self, idle_s: float = IDLE_COLLECT_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.idle_s = idle_s
        self.clock = clock
        self.last_activity = clock()
        self.pending = False
        """True when there was activity since the last full collection."""
        self.collections: list[float] = []
        """How long each full collection took (seconds), for the bench."""
        self._saved: tuple[int, int, int] | None = None

    def start(self) -> None:
        gc.freeze()
        self._saved = gc.get_threshold()
        young, middle, _old = self._saved
        gc.set_threshold(young, middle, FULL_COLLECTION_DEFERRED)

    def stop(self) -> None:
        """The thresholds as they were, and the frozen objects back in reach (an App that ends
        inside a longer process, a test run or the bench, leaves no garbage frozen)."""
        if self._saved is not None:
            gc.set_threshold(*self._saved)
            gc.unfreeze()
            self._saved = None

    def activity(self) -> None:
        """The user did something, or a job started or ended."""
        self.last_activity = self.clock()
        self.pending = True

    def tick(self, busy: bool) -> float | None:
        """Run the full collection if the App is idle and one is due; its duration, else None."""
        if busy or not self.pending or self.clock() - self.last_activity < self.idle_s:
            return None
        start = time.perf_counter()
        gc.collect()
        duration = time.perf_counter() - start
        self.collections.append(duration)
        self.pending = False
        return duration
