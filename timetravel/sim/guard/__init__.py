"""The determinism guard: user code in handlers sees a simulated clock and simulated entropy.

Python's usual determinism leaks are the wall clock, the global random generators and the
iteration order of sets under hash randomization. While a handler runs, the guard makes the
first two part of the world: clocks read logical time and random values are choices (recorded,
replayable, shrinkable). Calls that cannot be simulated — starting a thread, a real sleep, a new
asyncio loop, processes, sockets — raise :class:`DeterminismError` naming the call site.
Set-order leaks it cannot see; ``timetravel check-determinism`` finds those (docs/determinism.md).
Garbage-collector callbacks and the finalizers a collection runs are not the handler's code: they
see the real functions (interpreter.py says why).

Modes, per Simulation (default from ``Scenario.determinism``, overridden by ``--determinism``):
``virtualize`` (default), ``forbid`` (every clock and entropy read raises too) and ``off``.

The patches are installed once per process by the first guarded Simulation; the kernel switches
them on for its own thread only, for the duration of each run segment (:func:`enter`/:func:`leave`),
so other threads and code outside handlers see the real functions.
"""

from __future__ import annotations

from typing import Any

from timetravel.sim.guard.interpreter import keep_first_and_last
from timetravel.sim.guard.patches import (
    install,
    installed,
    original,
    patched_labels,
    refresh,
    uncovered_labels,
)
from timetravel.sim.guard.state import (
    MODE_DEFAULT,
    MODE_FORBID,
    MODE_OFF,
    MODE_VIRTUALIZE,
    MODES,
    DeterminismError,
    ModeError,
    activate,
    active_context,
    check_mode,
    deactivate,
    is_guard_file,
    suspended,
)
from timetravel.sim.guard.virtual import (
    SITE_NUMPY,
    SITE_RANDOM,
    SITE_RANDOM_SEED,
    SITE_URANDOM,
    SITE_UUID1,
    SITE_UUID4,
    VIRTUAL_EPOCH,
    VIRTUAL_EPOCH_NS,
)


def enter(context: Any, mode: str) -> tuple[Any, bool]:
    """Switch the guard on for this thread, serving ``context``; pass the result to :func:`leave`.

    Mode ``off`` switches it off for this thread (a nested unguarded run inside a guarded one).
    """
    if mode == MODE_OFF:
        return activate(None, mode)
    refresh()
    keep_first_and_last()
    return activate(context, mode)


def leave(previous: tuple[Any, bool]) -> None:
    """Switch this thread back to what it was before :func:`enter`."""
    deactivate(previous)


__all__ = [
    "MODES",
    "MODE_DEFAULT",
    "MODE_FORBID",
    "MODE_OFF",
    "MODE_VIRTUALIZE",
    "SITE_NUMPY",
    "SITE_RANDOM",
    "SITE_RANDOM_SEED",
    "SITE_URANDOM",
    "SITE_UUID1",
    "SITE_UUID4",
    "VIRTUAL_EPOCH",
    "VIRTUAL_EPOCH_NS",
    "DeterminismError",
    "ModeError",
    "active_context",
    "check_mode",
    "enter",
    "install",
    "installed",
    "is_guard_file",
    "leave",
    "original",
    "patched_labels",
    "refresh",
    "suspended",
    "uncovered_labels",
]
