"""Re-executing a recorded branch forward from one of its snapshots, without moving the cursor.

Searches (find-first, the last or next change of a path) and exports walk a run event by event or
in chunks, far from where the user's cursor stands. A :class:`Stepper` owns its own World, restored
from a snapshot, and its own Simulation bound to the branch's choice overrides; every chain batch
it flushes is checked against the recording, as a seek is, so a search never silently runs on a
different history (a difference raises :class:`ReplayDivergence`, naming the first event).

A stepper never runs past the recorded end (it cannot: there is nothing to verify against), and a
stepper that starts on a branch's parent before the fork stops at the fork: the branch's own
changes (new choices, edited faults) are in its snapshot at the fork, not in the parent's events.
:func:`walk` hides that seam: it continues from the fork snapshot when a walk crosses it.

:func:`recorded_events` reads the recorded event stream of a range, without re-executing: which
node an event went to is known before running it, so a search whose paths live in one node's state
can jump straight to the events that can change them.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from timetravel.explore.replay import ChainVerifier, ReplayDivergence
from timetravel.sim.encoding import pack
from timetravel.sim.event import Event
from timetravel.sim.kernel import Simulation

if TYPE_CHECKING:
    from timetravel.explore.session import Session
    from timetravel.sim.world import World

CHAIN_BATCH_EVENTS_DEFAULT = 4096


class Stepper:
    """A world re-executed forward from snapshot ``position`` of the session's branch."""

    def __init__(self, session: Session, position: int) -> None:
        snapshot = session.snapshots()[position]
        self.session = session
        self.start_events = snapshot.events
        self.final = snapshot.final
        self.world: World = session.snapshot_world(position)
        assert self.world.events_processed == snapshot.events, "a snapshot restores to its own event count"
        self.end_events = session.end.events
        fork = session.fork_events
        self.horizon = fork if fork > 0 and snapshot.events < fork else self.end_events
        """The last event this stepper may run to (the fork, when it starts on the parent's side)."""
        self.verifier = ChainVerifier(session.reader, session.event_batches, session.cause_if_mismatch)
        self._last_flushed: Event | None = None
        self.simulation = session.simulation(
            self.world,
            overrides=session.overrides_at(snapshot.events),
            chain_batch_events=int(session.header.get("chain_batch_events", CHAIN_BATCH_EVENTS_DEFAULT)),
            determinism=session.determinism,
            on_chain_batch=self._on_chain_batch,
            recorded=True,
        )
        self.executed = 0
        self._checked = self.world.events_processed
        """Events up to this number are verified (flushed batches by digest, the open one by event)."""
        """Events this stepper re-executed (a search reports the sum as its cost)."""

    @classmethod
    def before(cls, session: Session, events: int) -> Stepper:
        """A stepper from the latest snapshot (not a final one) at or before event #``events``."""
        return cls(session, position_at_or_before(session, events))

    @property
    def events(self) -> int:
        return self.world.events_processed

    def _on_chain_batch(self, first: int, events: list[Event], digest: bytes) -> None:
        self._last_flushed = events[-1] if events else None
        self.verifier.on_chain_batch(first, events, digest)

    def _runnable(self, count: int) -> int:
        """How many of ``count`` more events may run: none once final, never past the horizon."""
        if self.final:
            return 0
        return max(0, min(count, self.horizon - self.world.events_processed))

    def advance(self, count: int) -> int:
        """Run up to ``count`` more events (never past the horizon); return how many ran."""
        count = self._runnable(count)
        if count == 0:
            return 0
        before = self.world.events_processed
        self.simulation.run(max_events=count)
        ran = self.world.events_processed - before
        self.executed += ran
        self._check_new_events()
        return ran

    def advance_observed(self, count: int, on_event: Callable[[Event], None]) -> int:
        """Like :meth:`advance`, calling ``on_event(event)`` after each event with the world as it
        left it (one run with a pause after every event: no per-event call overhead of its own)."""
        count = self._runnable(count)
        if count == 0:
            return 0
        before = self.world.events_processed
        observed = [before]

        def pause(_simulation: Simulation) -> None:
            event = self.last_event()
            assert event is not None
            observed[0] = self.world.events_processed
            on_event(event)

        self.simulation.run(max_events=count, pause_every_events=1, on_pause=pause)
        if self.world.events_processed > observed[0]:
            # the run does not pause after its last event (its limit, or a failure)
            event = self.last_event()
            assert event is not None
            on_event(event)
        ran = self.world.events_processed - before
        self.executed += ran
        self._check_new_events()
        return ran

    def last_event(self) -> Event | None:
        """The event processed last (None before the first one)."""
        batch = self.world.chain_batch
        if batch:
            return batch[-1]
        return self._last_flushed if self.world.events_processed > self.start_events else None

    def at_end(self) -> bool:
        return self.world.events_processed >= self.end_events

    def finish(self) -> None:
        """At the recorded end, run the end of the run the way the recording stopped (end-of-run
        checks after a drained queue), so the world equals the recorded final state."""
        if self.final or not self.at_end():
            return
        end = self.session.reader.end(self.session.branch)
        stop = end.get("stop") if end is not None else None
        if stop == "until" and end is not None:
            self.simulation.run(until_ns=int(end["t_end_ns"]), max_events=1)
        elif stop in ("drained", "failure"):
            self.simulation.run(max_events=1)
        self.final = True
        self.verify_open_batch()

    def _check_new_events(self) -> None:
        """Compare the events run since the last check with the recorded ones, then raise on the
        first difference. Flushed batches were checked by digest as they flushed; the open batch
        is compared event by event (each event once), so a search that never fills a batch is
        verified too, at a cost proportional to what it ran."""
        if self.verifier.mismatch is not None:
            raise ReplayDivergence(self.verifier.mismatch)
        world = self.world
        first_open = world.chain_events
        start = max(self._checked, first_open)
        if world.events_processed > start:
            batch = world.chain_batch
            for number, recorded in recorded_events(self.session, start + 1, world.events_processed):
                if pack(recorded) != pack(batch[number - first_open - 1]):
                    self.verify_open_batch()  # names the first differing event
                    raise AssertionError(f"event #{number} differs but the open batch matched")
        self._checked = world.events_processed

    def verify_open_batch(self) -> None:
        """Check the events of the open chain batch against the recording (the batches that were
        flushed are checked as they flush)."""
        self.verifier.check_open_batch(self.world.chain_events, self.world.chain_batch)
        if self.verifier.mismatch is not None:
            raise ReplayDivergence(self.verifier.mismatch)


def resumable_positions(session: Session) -> list[int]:
    """Indexes in ``session.snapshots()`` a re-execution may start from: not final (the run had
    ended there), and accepted by the session's world source (explore/world_source.py)."""
    infos = session.snapshots_info
    return [
        index
        for index, snapshot in enumerate(session.snapshots())
        if not snapshot.final and session.source.can_start_at(infos[index])
    ]


def position_at_or_before(session: Session, events: int) -> int:
    """Index in ``session.snapshots()`` of the latest resumable snapshot at or before #``events``."""
    snapshots = session.snapshots()
    resumable = resumable_positions(session)
    numbers = [snapshots[index].events for index in resumable]
    found = bisect.bisect_right(numbers, events) - 1
    if found < 0:
        raise ValueError(f"no snapshot at or before event #{events}")
    return resumable[found]


def stepper_at(session: Session, events: int) -> Stepper:
    """A stepper standing at event #``events`` (restored from the nearest snapshot, then run)."""
    stepper = Stepper.before(session, events)
    return walk(stepper, events - stepper.events)


def walk(stepper: Stepper, count: int) -> Stepper:
    """Advance ``count`` events, continuing from the branch's own snapshot when a walk crosses the fork.

    Returns the stepper that stands at the new position (the same one unless the fork was crossed).
    """
    remaining = count - stepper.advance(count)
    while remaining > 0 and stepper.events == stepper.horizon < stepper.end_events:
        executed, fork = stepper.executed, stepper.horizon
        stepper = Stepper.before(stepper.session, fork)
        if stepper.events != fork:
            raise ValueError(f"branch {stepper.session.branch!r} has no snapshot at its fork (#{fork})")
        stepper.executed = executed
        ran = stepper.advance(remaining)
        if ran == 0:
            break
        remaining -= ran
    return stepper


def recorded_events(session: Session, first: int, last: int) -> Iterator[tuple[int, Event]]:
    """The recorded events #``first`` .. #``last`` (1-based, inclusive) with their numbers."""
    batches = session.event_batches
    starts = [batch.first for batch in batches]
    position = max(bisect.bisect_right(starts, first - 1) - 1, 0)
    for batch in batches[position:]:
        if batch.first >= last:
            return
        events = session.reader.events(batch)
        begin = max(first - batch.first - 1, 0)
        end = min(last - batch.first, len(events))
        for offset in range(begin, end):
            yield batch.first + offset + 1, events[offset]


def event_number_at_time(session: Session, t_ns: int) -> int:
    """The number of events processed by time ``t_ns`` (every event with ``t <= t_ns``)."""
    end = session.end
    if t_ns >= end.t_ns:
        return end.events
    if t_ns < 0:
        return 0
    low, high = 0, end.events
    while low < high:
        middle = (low + high + 1) // 2
        event = session.event(middle)
        if event is not None and event.t_ns <= t_ns:
            low = middle
        else:
            high = middle - 1
    return low
