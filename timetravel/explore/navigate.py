"""Where the cursor is, what happened around it, and where a watched path changes.

The moves themselves are the Session's (``goto``, ``step``, ``back``); this module turns the
cursor into the results the command language returns (:class:`CursorResult`,
:class:`EventsResult`) and moves the cursor to the next or the previous event that changes a
path, for the ``watch`` command, or that completes a collective (``step --collective``).

**By collective** (a torch recording): the unit is a completion of a collective on the World's
``c10d`` node, by any rank's group — the event at which its last member entered, which fixes every
member's result and its completion time ``t_done`` (the result reaches each rank a modelled
transfer later: the cursor stands at the completing event, and ``t_done`` is in the message). The
node counts completions (``nodes/c10d/completed``, one more at each such event), so the N-th next
completion is the first state where the count reaches the cursor's plus N: a monotone predicate,
found by bisecting snapshots (:func:`timetravel.explore.search.find_first`), not by stepping N
times. ``back`` stands after the previous completing event, leaving out the one the cursor stands
after, as ``watch --previous`` does. A recording without that node (dp_training, the other
built-in worlds) has no collectives to move by: :class:`NoCollectives` says so in one line. Finding that event is :mod:`timetravel.explore.search`'s job
(re-executing from snapshots without moving the cursor, every chain batch verified against the
recording); the walk is bounded by ``WATCH_SCAN_EVENTS_MAX`` re-executed events, and when nothing
changes within it the cursor stays where it was.
"""

from __future__ import annotations

from typing import Any

from timetravel.explore import search, watchpoints
from timetravel.explore.replay import PAYLOAD_TEXT_CHARS_MAX
from timetravel.explore.results import CursorResult, EventRow, EventsResult, WatchValue
from timetravel.explore.session import Session
from timetravel.explore.session_data import Position, RecordedEvent

COLLECTIVE_NODE = "c10d"
COLLECTIVES_COMPLETED = "completed"
"""``nodes/c10d/completed``: the collectives (and send/recv pairs) completed so far, any group."""

EVENT_ROWS_DEFAULT = 20
EVENT_ROWS_MAX = 1_000
"""Rows one ``events`` shows."""
EVENTS_SCAN_MAX = 100_000
"""Recorded events one filtered ``events`` looks through (rows and the count of the rest)."""
WATCH_SCAN_EVENTS_MAX = 100_000
"""Events re-executed by one ``watch --next`` or ``--previous`` before it gives up."""


def branch_failure(session: Session) -> dict[str, Any] | None:
    """The failure that ended the branch (the END frame's), else the first one recorded."""
    if session.info.failure is not None:
        return dict(session.info.failure)
    failures = session.failures()
    return dict(failures[0]) if failures else None


def _payload_text(payload: Any) -> str:
    text = repr(payload)
    return text if len(text) <= PAYLOAD_TEXT_CHARS_MAX else text[: PAYLOAD_TEXT_CHARS_MAX - 3] + "..."


def next_event(session: Session) -> dict[str, Any] | None:
    """The recorded event the next step runs (None at the end)."""
    event = session.event(session.position.events + 1)
    if event is None:
        return None
    return {"number": event.number, "t_ns": event.t_ns, "dst": event.node, "kind": event.kind}


def cursor_result(session: Session, watches: tuple[WatchValue, ...] = ()) -> CursorResult:
    position = session.position
    return CursorResult(
        branch=position.branch,
        t_ns=position.t_ns,
        event=position.events,
        events_total=session.end.events,
        t_end_ns=session.end.t_ns,
        failure=branch_failure(session),
        next_event=next_event(session),
        watches=watches,
        in_progress=session.info.in_progress,
    )


def _row(event: RecordedEvent) -> EventRow:
    return EventRow(event.number, event.t_ns, event.node, event.kind, _payload_text(event.payload))


def event_rows(
    session: Session,
    *,
    node: str | None = None,
    kind: str | None = None,
    count: int = EVENT_ROWS_DEFAULT,
    after: bool = False,
) -> EventsResult:
    """The ``count`` recorded events nearest the cursor that match the filters, in time order.

    Before the cursor (the default) the rows end with the event the cursor stands after;
    ``after`` gives the events the next steps run. ``omitted`` counts further matching events
    in the same direction (over at most EVENTS_SCAN_MAX events when filtering).
    """
    assert 0 <= count <= EVENT_ROWS_MAX, count
    cursor = session.position.events
    last = session.end.events
    numbers = range(cursor + 1, last + 1) if after else range(cursor, 0, -1)
    if node is None and kind is None:
        chosen = list(numbers[:count])
        omitted = max(len(numbers) - count, 0)
    else:
        chosen = []
        omitted = 0
        for scanned, number in enumerate(numbers):
            if scanned >= EVENTS_SCAN_MAX:
                break
            event = session.event(number)
            if event is None or (node is not None and event.node != node):
                continue
            if kind is not None and event.kind != kind:
                continue
            if len(chosen) < count:
                chosen.append(number)
            else:
                omitted += 1
    rows = [_row(event) for number in sorted(chosen) if (event := session.event(number)) is not None]
    return EventsResult(session.branch, tuple(rows), cursor, omitted)


def restore_position(session: Session, position: Position) -> None:
    """Put the cursor back exactly: the event count, and the clock a ``goto T`` had left."""
    session.goto_event(position.events)
    if session.position.t_ns != position.t_ns:
        session.goto_time(position.t_ns)
    assert session.position == position, (session.position, position)


def next_change(session: Session, path: str, events_max: int = WATCH_SCAN_EVENTS_MAX) -> Position | None:
    """Move the cursor to the first event after it that changes ``path``; None (the cursor
    unmoved) when none does before the end or within ``events_max`` re-executed events.

    The search is :func:`timetravel.explore.watchpoints.next_change`: it re-executes from the nearest
    snapshot without moving the cursor, and jumps between the events of the watched node."""
    found = watchpoints.next_change(
        session, path, start_events=session.position.events, events_max=events_max
    )
    if not found.found or found.event is None:
        return None
    session.goto_event(found.event)
    return session.position


def previous_change(session: Session, path: str, events_max: int = WATCH_SCAN_EVENTS_MAX) -> Position | None:
    """Go back to the last event before the cursor's that changed ``path`` (the cursor stands
    after it); None (the cursor unmoved) when none did since the start or within ``events_max``
    re-executed events. The event the cursor stands after is left out, so asking again walks
    further back, change by change.

    The search is :func:`timetravel.explore.watchpoints.last_change`: window by window between
    snapshots, latest first, skipping windows in which no event reaches the watched node."""
    cursor = session.position.events
    if cursor <= 0:
        return None
    found = watchpoints.last_change(session, path, start_events=cursor - 1, events_max=events_max)
    if not found.found or found.event is None:
        return None
    session.goto_event(found.event)
    return session.position


class NoCollectives(ValueError):
    """The recording has no collectives to move by (not a torch run)."""


def _completed(world: Any) -> int:
    node = world.nodes.get(COLLECTIVE_NODE)
    if not isinstance(node, dict) or not isinstance(node.get(COLLECTIVES_COMPLETED), int):
        raise NoCollectives(
            f"{world.scenario} recordings have no collectives to step by (only torch runs have a c10d "
            "node): step by events, or use watch --next PATH"
        )
    return int(node[COLLECTIVES_COMPLETED])


def _completion_event(session: Session, number: int, start_events: int = 0) -> int | None:
    """The event that completed the ``number``-th collective (1-based), None when the run has fewer."""
    predicate = f"nodes/{COLLECTIVE_NODE}/{COLLECTIVES_COMPLETED} >= {number}"
    found = search.find_first(session, predicate, start_events=start_events)
    return found.event if found.found else None


def step_collectives(session: Session, count: int = 1) -> tuple[Position, int]:
    """Move the cursor forward by ``count`` collective completions (to the last one when fewer follow);
    return the new position and how many completions it moved by (0: none after the cursor, unmoved)."""
    now = _completed(session.world)
    if count <= 0:
        return session.position, 0
    cursor = session.position.events
    event = _completion_event(session, now + count, cursor)
    moved = count
    if event is None:  # fewer follow: the last one, by the recorded end's count
        final = session.snapshots()[-1]
        moved = _completed(session.snapshot_world(len(session.snapshots()) - 1)) - now
        if moved <= 0 or not final.final:
            return session.position, 0
        event = _completion_event(session, now + moved, cursor)
        if event is None:
            return session.position, 0
    session.goto_event(event)
    return session.position, moved


def back_collectives(session: Session, count: int = 1) -> tuple[Position, int]:
    """Move the cursor back to stand after the ``count``-th completing event before the one it stands
    after (to the first one when fewer precede; 0: none before the cursor, the cursor unmoved)."""
    now = _completed(session.world)
    latest = now - 1 if completed_collective(session) is not None else now
    moved = min(max(count, 0), latest)
    if moved <= 0:
        return session.position, 0
    event = _completion_event(session, latest - moved + 1)
    assert event is not None, (latest, moved)
    session.goto_event(event)
    return session.position, moved


def completed_collective(session: Session) -> dict[str, Any] | None:
    """The collective the event the cursor stands after completed (op, key, ranks, t_done_ns), if any."""
    event = session.event(session.position.events)
    if (
        event is None
        or event.node != COLLECTIVE_NODE
        or event.kind != "call"
        or not isinstance(event.payload, dict)
    ):
        return None
    rank = event.payload.get("rank")
    record = session.world.nodes[COLLECTIVE_NODE].get("last", {}).get(str(rank))
    if not isinstance(record, dict) or record.get("state") != "completed" or "t_done_ns" not in record:
        return None
    return {
        "op": record["op"],
        "key": record["key"],
        "group": record["group"],
        "seq": record["seq"],
        "t_done_ns": int(record["t_done_ns"]),
        "completed": _completed(session.world),
    }
