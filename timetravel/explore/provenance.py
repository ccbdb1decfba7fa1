"""Value provenance: which event last wrote a state value, what that event read, and what caused it.

Nothing in a world records why a value is what it is, and a scenario's author should not have to
say. So provenance is *derived*: replay from the nearest snapshot and watch.

* :func:`trace_event` re-executes one recorded event with every node's state wrapped in a dict
  that notes each key the handlers read before writing it. It returns what the event read, what it
  changed (a structural diff of the nodes before and after), the faults that acted during it (the
  fabric's ``fault_hits``), the log lines it wrote and the events it scheduled.
* :func:`scheduled_by` finds the event that scheduled another one (a message's send, a timer's
  arming): ``seq`` is a global counter, so the scheduler is the event during which the world's
  counter passed that ``seq``; events scheduled when the world was built have none.
* :func:`origin` answers ``origin PATH --at T``: the reverse watchpoint (:func:`.watchpoints.last_change`)
  finds the last event at or before T that changed the value, then :func:`trace_event` says what it
  read and :func:`scheduled_by` what caused it.

The re-execution is verified against the recording like every seek (a different history raises),
and the wrappers live only for the one traced event, in a stepper of its own: the user's cursor
never moves.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from timetravel.explore.diff import Change, value_text
from timetravel.explore.diff import diff as structural_diff
from timetravel.explore.elided_values import reads_values
from timetravel.explore.explain_results import OriginResult, ReadValue, StateChange
from timetravel.explore.paths import parse_path, select, world_tree
from timetravel.explore.session import Session
from timetravel.explore.stepper import Stepper, position_at_or_before, resumable_positions, stepper_at
from timetravel.explore.watchpoints import last_change
from timetravel.explore.work import ExploreError
from timetravel.sim.event import Event

CHANGES_PER_EVENT_MAX = 64
"""State changes kept for one traced event (the rest are counted)."""
READS_PER_EVENT_MAX = 256
"""Distinct (node, key) reads noted for one traced event."""


class _ReadNoting(dict[str, Any]):
    """A node's state that notes each top-level key read before this event wrote it."""

    def __init__(self, data: dict[str, Any], node: str, reads: list[tuple[str, str]]) -> None:
        super().__init__(data)
        self._node = node
        self._reads = reads
        self._written: set[str] = set()
        self.noting = True

    def _note(self, key: Any) -> None:
        if self.noting and key not in self._written and len(self._reads) < READS_PER_EVENT_MAX:
            entry = (self._node, str(key))
            if entry not in self._reads:
                self._reads.append(entry)

    def __getitem__(self, key: Any) -> Any:
        self._note(key)
        return super().__getitem__(key)

    def get(self, key: Any, default: Any = None) -> Any:
        self._note(key)
        return super().get(key, default)

    def __contains__(self, key: object) -> bool:
        self._note(key)
        return super().__contains__(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        if self.noting:
            self._written.add(key)
        super().__setitem__(key, value)

    def setdefault(self, key: Any, default: Any = None) -> Any:
        self._note(key)
        return super().setdefault(key, default)

    def pop(self, key: Any, *default: Any) -> Any:
        self._note(key)
        return super().pop(key, *default)

    def _note_all(self) -> None:
        for key in list(super().keys()):
            self._note(key)

    def __iter__(self) -> Iterator[Any]:
        self._note_all()
        return super().__iter__()

    def keys(self) -> Any:
        self._note_all()
        return super().keys()

    def values(self) -> Any:
        self._note_all()
        return super().values()

    def items(self) -> Any:
        self._note_all()
        return super().items()


@dataclass(frozen=True)
class EventTrace:
    """What one event did, seen by re-executing it."""

    number: int
    event: Event
    reads: tuple[tuple[str, str], ...]
    """(node, key) pairs of node state the handlers read before writing them, in read order."""
    before: dict[str, Any]
    """Every node's state just before the event (deep copies)."""
    after: dict[str, Any]
    changes: tuple[Change, ...]
    """The structural diff of the nodes before -> after (paths ``nodes/NODE/...``)."""
    faults_hit: tuple[str, ...]
    """Fault ids whose hit count rose during the event (a fault acted on it or on what it sent)."""
    log: tuple[str, ...]
    scheduled: tuple[Event, ...]
    """The events it scheduled (its messages and timers)."""
    failed: bool
    roles: dict[str, str]
    faults: tuple[dict[str, Any], ...]
    """The world's fault schedule at the event (records by id)."""


def trace_event(
    session: Session, number: int, substitute: dict[tuple[str, str], Any] | None = None
) -> EventTrace:
    """Re-execute event #``number`` of the session's branch and note what it read and changed.

    ``substitute`` (node, key) -> value replaces those values just before the event runs: a
    counterfactual (what would this event have written had it read its peers' value?). The event
    itself is still the recorded one, so the replay's verification holds; what it writes may differ.
    """
    if not 1 <= number <= session.end.events:
        raise ExploreError(f"no event #{number} on {session.branch} (it has {session.end.events})")
    stepper = stepper_at(session, number - 1)
    world = stepper.world
    for (node, key), value in (substitute or {}).items():
        world.nodes[node][key] = copy.deepcopy(value)
    before = copy.deepcopy(world.nodes)
    hits_before = dict(world.fabric.get("fault_hits", {}) or {})
    log_before, seq_before = len(world.log), world.seq
    failures_before = len(world.failures)
    reads: list[tuple[str, str]] = []
    wrappers = {name: _ReadNoting(state, name, reads) for name, state in world.nodes.items()}
    for name, wrapper in wrappers.items():
        world.nodes[name] = wrapper
    try:
        stepper.advance(1)
    finally:
        for name, wrapper in wrappers.items():
            wrapper.noting = False
            current = world.nodes.get(name)
            if current is wrapper:
                world.nodes[name] = dict(wrapper)
    event = stepper.last_event()
    if event is None:
        raise ExploreError(f"event #{number} did not run")
    after = {name: world.nodes[name] for name in world.nodes}
    result = structural_diff(before, after, "nodes", changes_max=CHANGES_PER_EVENT_MAX)
    hits_after = world.fabric.get("fault_hits", {}) or {}
    faults_hit = tuple(key for key, value in hits_after.items() if value != hits_before.get(key, 0))
    scheduled = tuple(
        sorted((queued for queued in world.queue if queued[1] >= seq_before), key=lambda e: e[1])
    )
    return EventTrace(
        number=number,
        event=event,
        reads=tuple(reads),
        before=before,
        after=after,
        changes=result.changes,
        faults_hit=faults_hit,
        log=tuple(str(entry[-1]) for entry in world.log[log_before:]),
        scheduled=scheduled,
        failed=len(world.failures) > failures_before,
        roles=dict(world.roles),
        faults=tuple(world.faults),
    )


class SeqIndex:
    """The world's ``seq`` counter at each snapshot (restored once each, on demand)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self._seq_at: dict[int, int] = {}

    def seq_at(self, position: int) -> int:
        if position not in self._seq_at:
            self._seq_at[position] = self.session.snapshot_world(position).seq
        return self._seq_at[position]

    def scheduled_by(self, seq: int) -> int | None:
        """The number of the event during which ``seq`` was assigned; None: at build time."""
        session = self.session
        resumable = resumable_positions(session)
        low, high = 0, len(resumable) - 1
        if not resumable or self.seq_at(resumable[0]) > seq:
            return None
        while low < high:  # the latest snapshot whose counter is still <= seq
            middle = (low + high + 1) // 2
            if self.seq_at(resumable[middle]) <= seq:
                low = middle
            else:
                high = middle - 1
        stepper = Stepper(session, resumable[low])
        if stepper.events == 0 and stepper.world.seq > seq:
            return None
        while stepper.world.seq <= seq:
            if stepper.advance(1) == 0:
                return None
        return stepper.events


def scheduled_by(session: Session, seq: int) -> int | None:
    """The event that scheduled the event with ``seq`` (None: it was scheduled at build time)."""
    return SeqIndex(session).scheduled_by(seq)


def event_label(event: Event) -> str:
    return f"{event.kind} -> {event.dst}"


def reads_of(trace: EventTrace, node: str | None = None) -> list[tuple[str, str]]:
    return [read for read in trace.reads if node is None or read[0] == node]


def changes_of(trace: EventTrace, path: str) -> list[Change]:
    """The traced event's changes at or under ``path``."""
    return [c for c in trace.changes if c.path == path or c.path.startswith(path + "/")]


@reads_values
def origin(session: Session, path: str, at: int | str | None = None) -> OriginResult:
    """``origin PATH --at T``: the last event at or before T (default: the cursor) that changed the
    value at ``path``, what it changed it from and to, what that event read, and what caused it."""
    probe = Session(session.reader, session.scenario, session.branch, session.launch)
    position = probe.goto(at) if at is not None else probe.goto_event(session.position.events)
    start, at_ns = position.events, probe.world.t_ns
    if not select(world_tree(probe.world), parse_path(path)):
        raise ExploreError(f"no value at {path} on {session.branch} at event #{start}")
    found = last_change(session, path, start_events=start)
    if found.stopped_by is not None:
        raise ExploreError(f"origin: the search stopped ({found.stopped_by})")
    if not found.found or found.event is None or found.kind == "end":
        return OriginResult(path, session.branch, at_ns, None)
    trace = trace_event(session, found.event)
    scheduler = scheduled_by(session, trace.event.seq)
    written = [StateChange(c.path, c.change, c.summary) for c in changes_of(trace, path)]
    return OriginResult(
        path=path,
        branch=session.branch,
        at_ns=at_ns,
        event=found.event,
        t_ns=trace.event.t,
        node=trace.event.dst,
        kind=trace.event.kind,
        changes=tuple(written),
        reads=tuple(
            ReadValue(f"nodes/{node}/{key}", _value_text(trace.before[node].get(key)))
            for node, key in trace.reads
        ),
        caused_by=scheduler,
        faults_hit=trace.faults_hit,
        log=trace.log,
    )


def _value_text(value: Any) -> str:
    return value_text(value)


__all__ = [
    "EventTrace",
    "SeqIndex",
    "event_label",
    "origin",
    "position_at_or_before",
    "scheduled_by",
    "trace_event",
]
