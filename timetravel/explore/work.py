"""Long explore work (branch, fanout, likelihood, divergence, rerun): progress, stopping, bounds.

Every long function takes ``progress`` (called with a :class:`WorkProgress` after each unit of
work: a chunk of events, a sampled future, a snapshot) and ``should_stop`` (polled between
units; True stops the work, which then returns what it has or raises :class:`WorkStopped`). The
TUI runs such work in a worker and wires its cancel key to ``should_stop``; the CLI draws a
progress bar on a terminal. Simulation runs are bounded by a number of events derived from the
recorded run, so a change that makes a future run forever stops with a clear reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from timetravel.sim.kernel import STOP_MAX_EVENTS, RunResult
from timetravel.sim.world import World

RUN_EVENTS_FACTOR = 4
RUN_EVENTS_SLACK = 100_000
"""A future may process FACTOR times the recorded run's events plus SLACK before it is stopped."""
CHUNK_EVENTS = 8_192
"""Events run between two progress reports and stop checks."""
OUTCOME_CANCELLED = "cancelled"
OUTCOME_UNFINISHED = "unfinished"
"""A future stopped by the event bound: neither a pass nor a failure."""


@dataclass(frozen=True)
class WorkProgress:
    """How far a long piece of work is: ``done`` of ``total`` units of ``task``."""

    task: str
    done: int
    total: int
    detail: str = ""

    def __post_init__(self) -> None:
        # Some totals are estimates (a branch runs as long as its parent did, unless its change
        # makes it run on): past the estimate the total grows with the work, so that a report
        # never reads "8,192/4,793".
        if self.done > self.total:
            object.__setattr__(self, "total", self.done)

    @property
    def fraction(self) -> float:
        return min(1.0, self.done / self.total) if self.total > 0 else 0.0


ProgressCallback = Callable[[WorkProgress], None]
StopCheck = Callable[[], bool]


class ExploreError(ValueError):
    """Input the explore engine cannot act on (an unknown branch, a time past the end, a change a
    branch cannot make); the one-line message says why. Front ends show it as a user error."""


class WorkStopped(Exception):
    """``should_stop`` returned True before the work had a result to give."""


def events_bound(recorded_events: int) -> int:
    """The events a future of a run with ``recorded_events`` events may process."""
    return RUN_EVENTS_FACTOR * recorded_events + RUN_EVENTS_SLACK


Runner = Callable[[int | None, int | None], RunResult]
"""``run(until_ns, max_events)``: ``Simulation.run`` or ``Recorder.run`` (which also snapshots)."""


def run_bounded(
    run: Runner,
    world: World,
    *,
    until_ns: int | None,
    events_max: int,
    should_stop: StopCheck | None = None,
    on_chunk: Callable[[int], None] | None = None,
) -> RunResult | None:
    """Run until the end, a failure, ``until_ns`` or ``events_max`` processed events in all.

    Runs in chunks of CHUNK_EVENTS so that ``on_chunk(events_processed)`` can report and
    ``should_stop`` (asked before every chunk) can cancel: then None is returned. A recorder's pauses (snapshots) are
    unaffected: they hang off the event count, not the chunk.
    """
    while True:
        if should_stop is not None and should_stop():
            return None
        chunk = max(0, min(CHUNK_EVENTS, events_max - world.events_processed))
        result = run(until_ns, chunk)
        if on_chunk is not None:
            on_chunk(world.events_processed)
        if result.stop != STOP_MAX_EVENTS or world.events_processed >= events_max:
            return result


def outcome_of(result: RunResult, events_max: int) -> str:
    """``pass``/``fail``, or ``unfinished`` when the event bound stopped a run that had not ended."""
    if result.outcome == "pass" and result.stop == STOP_MAX_EVENTS and result.events >= events_max:
        return OUTCOME_UNFINISHED
    return result.outcome
