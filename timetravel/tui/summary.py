"""What the TUI would show, as text: ``timetravel tui PATH`` when stdout is not a terminal.

A pipe, a CI log or ``make demo`` without a terminal cannot host the TUI, but the questions it
answers still have answers: what failed, when and where; which faults fired before; which ranks
are the odd ones out at the failure; which branches exist; and the command lines that would
explore it. The summary is built from the same :class:`~timetravel.tui.model.CursorView` the
main screen shows (the cursor at the failure, or at ``--at``), so the two never disagree.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from timetravel.sim.timefmt import format_time
from timetravel.tui.model import RANK_STATES, CursorView

OUTLIERS_SHOWN_MAX = 8
MARKS_SHOWN_MAX = 8


def summary_data(view: CursorView, path: str, failure: dict[str, Any] | None = None) -> dict[str, Any]:
    """The summary as JSON-ready data (``timetravel tui PATH --json``); ``failure`` is the branch's
    (kind, node, t_ns, message, signature), None when it passed."""
    ranks = view.ranks
    counts = Counter(cell.state for cell in ranks)
    outliers = sorted(
        (cell for cell in ranks if cell.state != "healthy"), key=lambda cell: -RANK_STATES.index(cell.state)
    )
    leader = max((cell.step for cell in ranks), default=0)
    marks = [mark for mark in view.timeline.marks if mark.kind in ("fault", "failure", "branch")]
    return {
        "recording": path,
        "title": view.title,
        "branch": view.branch,
        "status": view.status,
        "failure": failure,
        "cursor": {"t_ns": view.cursor_ns, "event": view.event_number},
        "events": view.events_total,
        "t_end_ns": view.timeline.t_end_ns,
        "snapshots": sum(1 for mark in view.timeline.marks if mark.kind == "snapshot"),
        "marks": [{"t_ns": mark.t_ns, "kind": mark.kind, "label": mark.label} for mark in marks],
        "ranks": {state: counts[state] for state in RANK_STATES if counts[state]},
        "leader_step": leader,
        "outliers": [
            {
                "name": cell.name,
                "state": cell.state,
                "step": cell.step,
                "collective_seq": cell.collective_seq,
                "waiting_on": cell.waiting_on,
            }
            for cell in outliers
        ],
        "branches": [
            {"name": branch.name, "parent": branch.parent, "at_ns": branch.at_ns, "outcome": branch.outcome}
            for branch in view.branches
        ],
    }


def summary_lines(data: dict[str, Any], unit: str) -> list[str]:
    """The summary as a few readable lines."""

    def when(t_ns: int) -> str:
        return format_time(t_ns, unit)

    cursor = data["cursor"]
    lines = [
        f"{data['title']} · {data['recording']}",
        f"  {data['branch']}: {data['status']} · {data['events']:,} events to {when(data['t_end_ns'])}, "
        f"{data['snapshots']} snapshots",
    ]
    marks = data["marks"]
    if marks:
        lines.append("  timeline:")
        for mark in marks[-MARKS_SHOWN_MAX:]:
            lines.append(f"    {when(mark['t_ns']):>14}  {mark['kind']:<8} {mark['label']}")
        if len(marks) > MARKS_SHOWN_MAX:
            lines.append(f"    … and {len(marks) - MARKS_SHOWN_MAX} earlier marks")
    ranks = ", ".join(f"{count} {state}" for state, count in data["ranks"].items()) or "none"
    lines.append(f"  ranks at {when(cursor['t_ns'])} (event #{cursor['event']:,}): {ranks}")
    for outlier in data["outliers"][:OUTLIERS_SHOWN_MAX]:
        words = [f"    {outlier['name']}: {outlier['state']}"]
        if data["leader_step"]:
            words.append(f"step {outlier['step']} ({data['leader_step'] - outlier['step']} behind)")
        if outlier["collective_seq"]:
            words.append(f"collective #{outlier['collective_seq']}")
        if outlier["waiting_on"]:
            words.append(f"waiting on {outlier['waiting_on']}")
        lines.append(", ".join(words))
    if len(data["outliers"]) > OUTLIERS_SHOWN_MAX:
        lines.append(f"    … and {len(data['outliers']) - OUTLIERS_SHOWN_MAX} more")
    if len(data["branches"]) > 1:
        lines.append("  branches: " + ", ".join(f"{b['name']} {b['outcome']}" for b in data["branches"]))
    return lines
