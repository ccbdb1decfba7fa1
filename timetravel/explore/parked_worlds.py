"""Former cursor worlds a Session keeps, so that seeking back to where it was costs nothing.

A debugger's user goes back and forth between a few moments (before and after a fault, two steps
of a training run). Each seek restored a snapshot and re-executed up to the target: at 10,000 ranks
80-150 ms however often the same moment was visited. The world the cursor leaves is exactly the
recorded state at its position, so instead of freeing it the Session parks it here, with the names
of its nodes whose states are shared (explore/seek_nodes.py), and a later seek starts from it when
the rules of a start from the cursor allow it.

One more rule makes a parked world (or the cursor) serve targets *before* its clock: ``goto(t)``
is the state after every event with ``t <= target``, and the kernel's run then sets the clock to
the target. A world that has run events #1..#E and reads ``t_ns`` therefore differs from the world
at an earlier target ``t`` only in its clock, when event #E happened at or before ``t`` (no event
lies between ``t`` and ``t_ns``: the run that stopped at ``t_ns`` would have run it). Such a seek is
the world with its clock set to ``t``, bit for bit the world a restore and a re-execution give
(``state_hash`` equal; tests/test_seek_parked.py compares them after every kind of move). In a
10,000-rank training step, most of the simulated time is such a quiet interval (the ranks'
compute, ~9 ms of each ~9.4 ms step), so most seeks land in one.

Bounded by count (``PARKED_WORLDS_MAX``): a parked world holds its private states (the 850-1,800
ranks a seek re-executed, ~10-20 MB at 10,000 ranks) and keeps its shared states alive even once
the shared-state cache has let them go (up to a snapshot's worth, ~100 MB). A world with failures is
never parked; every parked world is forgotten when a re-execution diverged or failed (it may share
a state the diverged events wrote) and when the Session reloads its recording.
"""

from __future__ import annotations

from collections.abc import Callable

from timetravel.sim.world import World

PARKED_WORLDS_MAX = 2
"""Former cursor worlds kept (the most recently left first out of the way last)."""


def quiet_until(world: World, t_ns: int, event_time: Callable[[int], int | None]) -> bool:
    """Whether ``world`` is the world at ``t_ns`` but for its clock: ``t_ns`` is before its clock
    and its last event (#``events_processed``, at ``event_time(number)``, None when unknown) is not
    after ``t_ns``."""
    if world.failures or t_ns >= world.t_ns:
        return False
    if world.events_processed == 0:
        return True
    last = event_time(world.events_processed)
    return last is not None and last <= t_ns


class ParkedWorlds:
    """The worlds the cursor left, most recent last, with their shared node names."""

    def __init__(self, count_max: int = PARKED_WORLDS_MAX) -> None:
        self.count_max = count_max
        self._worlds: list[tuple[World, dict[str, bytes]]] = []

    def __len__(self) -> int:
        return len(self._worlds)

    def park(self, world: World, shared: dict[str, bytes]) -> None:
        """Keep ``world`` (the cursor's, which the cursor is leaving); the oldest goes past the bound."""
        if world.failures or self.count_max <= 0 or any(held is world for held, _ in self._worlds):
            return
        self._worlds.append((world, dict(shared)))
        del self._worlds[: -self.count_max]

    def take(self, usable: Callable[[World], bool]) -> tuple[World, dict[str, bytes]] | None:
        """The most recently parked world ``usable`` accepts, no longer parked; None if there is none."""
        for index in range(len(self._worlds) - 1, -1, -1):
            world, shared = self._worlds[index]
            if usable(world):
                del self._worlds[index]
                return world, shared
        return None

    def clear(self) -> None:
        self._worlds.clear()


__all__ = ["PARKED_WORLDS_MAX", "ParkedWorlds", "quiet_until"]
