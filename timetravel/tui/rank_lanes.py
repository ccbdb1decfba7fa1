"""A torch run's collectives and optimizer steps per rank, and a hang's flight recorder, as widget data.

The torch scenario's World keeps only each rank's *last* collective (``nodes/c10d/last``) and a
short flight recorder; the history the timeline draws is in the recorded events, read once per
branch (a branch never changes once recorded):

* a ``call`` event to the node of role ``collectives`` (``c10d``) is a rank entering a collective:
  its payload names the rank, the op, the group and the sequence number (``seq``) and the work id;
* a ``wait`` event to it lists the work ids the rank then blocks on;
* the next ``poll`` of that rank whose payload carries a ``delivery`` is the result reaching it:
  every collective the rank waited on ends there (an async op the rank waits on later ends when
  it is waited, as the rank sees it). A collective never delivered (a hang) has no end;
* a ``state`` event to a rank (its payload's ``step``) is the end of its optimizer step.

At most :data:`EVENTS_READ_MAX` events are read (the spans of a longer run stop there) and at most
:data:`SPANS_MAX` spans kept. Nothing here imports textual.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from timetravel.explore.session import Session
from timetravel.tui.model import CollectiveSpan, FlightRow, StepMark

COLLECTIVES_NODE_ROLE = "collectives"
EVENTS_READ_MAX = 200_000
SPANS_MAX = 50_000
FLIGHT_RECORDER_KEY = "flight_recorder"


def _collectives_nodes(session: Session) -> set[str]:
    roles = session.world.roles
    return {name for name, role in roles.items() if role == COLLECTIVES_NODE_ROLE}


def collective_lanes(
    session: Session,
) -> tuple[tuple[str, ...], tuple[CollectiveSpan, ...], tuple[StepMark, ...]]:
    """The ranks, their collectives and their optimizer steps along the session's branch.

    Empty for a world without a node of role ``collectives`` (every scenario but torch)."""
    collectives = _collectives_nodes(session)
    if not collectives:
        return (), (), ()
    ranks: dict[str, None] = {}
    entered: dict[tuple[str, int], tuple[str, str, int, int]] = {}
    waited: dict[str, list[int]] = {}
    spans: list[CollectiveSpan] = []
    steps: list[StepMark] = []
    last = min(session.end.events, EVENTS_READ_MAX)
    for number in range(1, last + 1):
        event = session.event(number)
        if event is None:
            break
        payload = event.payload
        if event.node in collectives and isinstance(payload, dict):
            _collective_event(event.kind, event.t_ns, payload, ranks, entered, waited)
        elif event.kind == "poll" and isinstance(payload, dict) and "delivery" in payload:
            for work in waited.pop(event.node, []):
                opened = entered.pop((event.node, work), None)
                if opened is not None and len(spans) < SPANS_MAX:
                    op, group, seq, start = opened
                    spans.append(CollectiveSpan(event.node, op, group, seq, start, event.t_ns))
        elif event.kind == "state" and isinstance(payload, dict) and isinstance(payload.get("step"), int):
            ranks.setdefault(event.node, None)
            if len(steps) < SPANS_MAX:
                steps.append(StepMark(event.node, payload["step"], event.t_ns))
    for (rank, _work), (op, group, seq, start) in entered.items():
        if len(spans) < SPANS_MAX:
            spans.append(CollectiveSpan(rank, op, group, seq, start, None))
    order = sorted(ranks, key=_rank_order)
    spans.sort(key=lambda span: (span.t_start_ns, _rank_order(span.rank)))
    return tuple(order), tuple(spans), tuple(steps)


def _collective_event(
    kind: str,
    t_ns: int,
    payload: Mapping[str, Any],
    ranks: dict[str, None],
    entered: dict[tuple[str, int], tuple[str, str, int, int]],
    waited: dict[str, list[int]],
) -> None:
    rank_index = payload.get("rank")
    if not isinstance(rank_index, int):
        return
    rank = f"r{rank_index}"
    ranks.setdefault(rank, None)
    if kind == "call" and isinstance(payload.get("id"), int):
        seq = payload.get("seq")
        entered[(rank, payload["id"])] = (
            str(payload.get("op", "?")),
            str(payload.get("group", "")),
            seq if isinstance(seq, int) else 0,
            t_ns,
        )
    elif kind == "wait":
        works = payload.get("works")
        if isinstance(works, list):
            waited.setdefault(rank, []).extend(work for work in works if isinstance(work, int))


def _rank_order(name: str) -> tuple[int, str]:
    digits = name[1:]
    return (int(digits), name) if digits.isdigit() else (1 << 30, name)


def flight_rows(failures: Iterable[Mapping[str, Any]]) -> tuple[str, tuple[FlightRow, ...]]:
    """The first hang's flight recorder as rows, and a title naming the hang; ``("", ())`` without one."""
    for failure in failures:
        rows = failure.get(FLIGHT_RECORDER_KEY)
        if not isinstance(rows, list):
            continue
        entries = [row for row in rows if isinstance(row, dict) and isinstance(row.get("rank"), str)]
        waited_by: dict[str, list[str]] = {}
        for row in entries:
            for peer in row.get("waits_on") or ():
                waited_by.setdefault(str(peer), []).append(row["rank"])
        table = tuple(_flight_row(row, tuple(waited_by.get(row["rank"], ()))) for row in entries)
        where = f" on {failure['node']}" if failure.get("node") else ""
        return f"flight recorder · {failure.get('kind', 'hang')}{where}", table
    return "", ()


def _flight_row(row: Mapping[str, Any], waited_by: tuple[str, ...]) -> FlightRow:
    last_entered = str(row.get("last_entered") or "")
    what, t_enter = "", None
    for entry in reversed(row.get("entries") or []):
        if isinstance(entry, dict) and entry.get("key") == last_entered:
            what = str(entry.get("what", ""))
            t_enter = entry.get("t_enter_ns") if isinstance(entry.get("t_enter_ns"), int) else None
            break
    return FlightRow(
        rank=row["rank"],
        status=str(row.get("status", "")),
        last_entered=last_entered,
        last_completed=str(row.get("last_completed") or ""),
        what=what,
        waits_on=tuple(str(peer) for peer in row.get("waits_on") or ()),
        waited_by=waited_by,
        t_enter_ns=t_enter,
    )
