"""A seek runs with the cyclic garbage collector paused, as the kernel's run does."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

from timetravel.sim.kernel import promote_survivors

SEEK_YOUNG_PROMOTED_MIN = 10_000
"""Young allocations from which a seek promotes its survivors unscanned (``gc_paused``)."""


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector during a seek, as the kernel does during a run.

    Worlds and decoded blobs are acyclic, so nothing is lost; but a seek allocates thousands of
    containers, and with the reader's caches holding hundreds of thousands more, a full
    collection in the middle of a seek costs more than the seek itself (a p95 of 240 ms
    against a p50 of 44 ms on the 1024-node benchmark recording).

    The collector still counts what a paused seek allocates, so after a first visit into a
    10,000-rank snapshot (~50,000 new containers) the first allocation of the *next* call found the
    young generation far past its threshold and collected — once in a while all the way up: a full
    collection of ~900 ms inside a later seek (the bench's p95, 2026-12-02). What the seek kept is
    acyclic data the Session holds on to, so its survivors are promoted unscanned, as the kernel's
    run does (sim/kernel.py ``promote_survivors``).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            promote_survivors(SEEK_YOUNG_PROMOTED_MIN)
            gc.enable()


__all__ = ["SEEK_YOUNG_PROMOTED_MIN", "gc_paused"]
