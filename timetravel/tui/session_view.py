"""The main screen's data from an open recording: a CursorView from the Session at its cursor.

Two kinds of facts go into a view. Facts of a *branch* never change once it is recorded (the
file is append-only): its end, its snapshot times, its failure, its loss curve. They are read
once per branch into :class:`BranchFacts`. Facts of the *cursor* change with every move: the
rank cells, the world for the inspector, the fault marks (the schedule lives in the world). The
world handed to the inspector is an independent copy, because the Session's own world changes
under the next seek while the UI thread is still reading the old one.

Nothing here imports textual; :class:`timetravel.tui.engine.Engine` calls it on a worker thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from timetravel.explore.branch_tree import OUTCOME_IN_PROGRESS, branch_tree
from timetravel.explore.navigate import branch_failure
from timetravel.explore.paths import world_tree
from timetravel.explore.results import BranchesResult
from timetravel.explore.session import Session
from timetravel.sim.timefmt import format_time
from timetravel.tui.adapt import branch_infos, failure_label
from timetravel.tui.feed import fault_label, fault_start_ns, payload_text, rank_cells_from_world
from timetravel.tui.model import (
    BranchInfo,
    CollectiveSpan,
    CursorView,
    EventRow,
    EventSource,
    KernelSpan,
    RaceEdge,
    StepMark,
    TimelineData,
    TimeMark,
)
from timetravel.tui.rank_lanes import collective_lanes, flight_rows

SNAPSHOT_MARKS_MAX = 2_000
"""Snapshot marks drawn on the timeline (evenly thinned past this; a column holds one anyway)."""
OUTCOME_GLYPHS = {"pass": "✔", "fail": "✖", OUTCOME_IN_PROGRESS: "⋯"}
EVENT_ROWS_AROUND = 100
"""Event-log rows either side of the cursor read with each view (a tall terminal shows ~100)."""


@dataclass(frozen=True)
class BranchFacts:
    """What a recorded branch is, read once: its extent, snapshots, failure and loss curve."""

    branch: str
    events: int
    t_end_ns: int
    outcome: str
    failure: dict[str, Any] | None
    snapshots_ns: tuple[int, ...]
    loss: tuple[tuple[int, float], ...]
    lanes: tuple[str, ...] = ()
    collectives: tuple[CollectiveSpan, ...] = ()
    steps: tuple[StepMark, ...] = ()


def curve(series: Sequence[Sequence[Any]]) -> tuple[tuple[int, float], ...]:
    """``[[t_ns, node, value], ...]`` as ``(t_ns, value)`` points (non-numbers skipped)."""
    points = []
    for entry in series:
        t_ns, value = entry[0], entry[-1]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            points.append((int(t_ns), float(value)))
    return tuple(points)


def branch_facts(session: Session) -> BranchFacts:
    snapshots = [info.t_ns for info in session.snapshots()]
    step = max(1, -(-len(snapshots) // SNAPSHOT_MARKS_MAX))
    loss_metric = session.scenario.view.loss_metric
    loss = curve(session.metric_series(loss_metric)) if loss_metric in session.metric_names() else ()
    failure = branch_failure(session)
    if session.info.in_progress:
        outcome = OUTCOME_IN_PROGRESS
    else:
        outcome = session.info.outcome or ("fail" if failure is not None else "unknown")
    lanes, collectives, steps = collective_lanes(session)
    return BranchFacts(
        branch=session.branch,
        events=session.end.events,
        t_end_ns=session.end.t_ns,
        outcome=outcome,
        failure=failure,
        snapshots_ns=tuple(snapshots[::step]),
        loss=loss,
        lanes=lanes,
        collectives=collectives,
        steps=steps,
    )


def branch_rows(session: Session) -> tuple[BranchInfo, ...]:
    """The branch tree of the recording, as the BranchTree shows it."""
    return branch_infos(BranchesResult(branch_tree(session.reader), session.branch), session.display_unit)


def status_text(facts: BranchFacts, unit: str) -> str:
    """``✖ nan on r5 @1040ms``, ``✔ pass`` or the outcome of an unfinished branch."""
    if facts.failure is not None:
        ahead = " (recording in progress)" if facts.outcome == OUTCOME_IN_PROGRESS else ""
        return f"✖ {failure_label(facts.failure, unit)}{ahead}"
    if facts.outcome == OUTCOME_IN_PROGRESS:
        return "⋯ recording in progress"
    return f"{OUTCOME_GLYPHS.get(facts.outcome, '?')} {facts.outcome}"


def timeline(
    facts: BranchFacts,
    faults: Sequence[dict[str, Any]],
    branches: Sequence[BranchInfo],
    likelihood: Sequence[tuple[int, float]],
    unit: str,
) -> TimelineData:
    """The branch along time: snapshots, its faults, the branches forked from it, its failure."""
    marks = [TimeMark(t_ns, "snapshot") for t_ns in facts.snapshots_ns]
    for fault in faults:
        start = fault_start_ns(fault)
        if start is not None and 0 <= start <= facts.t_end_ns:
            marks.append(TimeMark(start, "fault", fault_label(fault)))
    for branch in branches:
        if branch.parent == facts.branch and branch.at_ns is not None:
            marks.append(TimeMark(branch.at_ns, "branch", branch.name))
    if facts.failure is not None and isinstance(facts.failure.get("t_ns"), int):
        # A hang is reported at the wait's start + hang_timeout, after the last event: nothing
        # happens in between, so its mark stands at the end of the branch, where the ranks wait.
        at = min(facts.failure["t_ns"], facts.t_end_ns) if facts.outcome != OUTCOME_IN_PROGRESS else None
        label = failure_label(facts.failure, unit)
        if at is not None and at < facts.failure["t_ns"]:
            label += f" (after the last event, at {format_time(at, unit)})"
        marks.append(TimeMark(facts.failure["t_ns"] if at is None else at, "failure", label))
    marks.sort(key=lambda mark: mark.t_ns)
    return TimelineData(
        t_start_ns=0,
        t_end_ns=max(facts.t_end_ns, 1),
        unit=unit,
        marks=tuple(marks),
        loss=facts.loss,
        likelihood=tuple(likelihood),
        lanes=facts.lanes,
        collectives=facts.collectives,
        steps=facts.steps,
    )


def rows_around(session: Session, count: int = EVENT_ROWS_AROUND) -> tuple[EventRow, ...]:
    """The recorded events ``count`` either side of the cursor, as the event log shows them."""
    cursor = session.position.events
    rows = []
    for number in range(max(cursor - count, 1), min(cursor + count, session.end.events) + 1):
        event = session.event(number)
        if event is not None:
            rows.append(
                EventRow(event.number, event.t_ns, event.node, event.kind, payload_text(event.payload))
            )
    return tuple(rows)


def title(session: Session) -> str:
    info = session.info
    return f"{info.scenario} seed {info.seed}"


def cursor_view(
    session: Session,
    facts: BranchFacts,
    branches: Sequence[BranchInfo],
    *,
    likelihood: Sequence[tuple[int, float]] = (),
    events: EventSource | None = None,
    spans: Sequence[KernelSpan] = (),
    races: Sequence[RaceEdge] = (),
) -> CursorView:
    """Everything the main screen shows with the cursor where the session stands."""
    world = session.world
    unit = session.display_unit
    position = session.position
    copy = session.world_copy()
    flight_title, flight = flight_rows(copy.failures)
    return CursorView(
        title=title(session),
        unit=unit,
        cursor_ns=position.t_ns,
        timeline=timeline(facts, world.faults, branches, likelihood, unit),
        ranks=tuple(rank_cells_from_world(copy, session.scenario.view)),
        spans=tuple(spans),
        races=tuple(races),
        events=events,
        document=world_tree(copy),
        branches=tuple(branches),
        branch=position.branch,
        event_number=position.events,
        events_total=facts.events,
        event_rows=rows_around(session),
        status=status_text(facts, unit),
        in_progress=facts.outcome == OUTCOME_IN_PROGRESS,
        failure_node=str((facts.failure or {}).get("node") or ""),
        flight=flight,
        flight_title=flight_title,
    )
