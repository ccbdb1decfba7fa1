"""The event log's index over a recording: the recorded events, numbered as ``goto #N`` reads them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.fabric_example import SCENARIO as FABRIC_EXAMPLE
from tests.tui.conftest import BRANCH_FORK_EVENT
from timetravel.explore.session import Session
from timetravel.tui.event_index import index_events, window_for


def recorded(path: Path, branch: str = "main") -> list[Any]:
    with Session.open(path, scenario=FABRIC_EXAMPLE, branch=branch) as session:
        return [session.event(number) for number in range(1, session.end.events + 1)]


def test_rows_are_the_recorded_events_numbered_from_one(
    fabric_recording: tuple[Path, dict[str, Any]],
) -> None:
    path, report = fabric_recording
    events = recorded(path)
    table = index_events(path, "main", (1, report["events"]))
    try:
        assert len(table) == report["events"] == len(events)
        for index in (0, 1, 99, len(events) - 1):
            row, event = table.row(index), events[index]
            assert (row.number, row.t_ns, row.dst, row.kind) == (
                event.number,
                event.t_ns,
                event.node,
                event.kind,
            )
        r2 = table.filtered(node="r2")
        assert [r2.row(index).number for index in range(len(r2))] == [
            e.number for e in events if e.node == "r2"
        ]
        assert table.index_of_number(BRANCH_FORK_EVENT) == BRANCH_FORK_EVENT - 1
        t_ns = events[299].t_ns
        assert table.row(table.index_at_time(t_ns)).number == max(e.number for e in events if e.t_ns <= t_ns)
    finally:
        table.close()


def test_a_branch_index_holds_its_parents_prefix_then_its_own_events(
    fabric_recording: tuple[Path, dict[str, Any]],
) -> None:
    path, _report = fabric_recording
    events = recorded(path, "b1")
    table = index_events(path, "b1", (1, len(events)))
    try:
        rows = [table.row(index) for index in range(len(table))]
        assert [(row.number, row.t_ns, row.dst, row.kind) for row in rows] == [
            (event.number, event.t_ns, event.node, event.kind) for event in events
        ]
        main = recorded(path)[:BRANCH_FORK_EVENT]
        assert [(row.t_ns, row.dst, row.kind) for row in rows[:BRANCH_FORK_EVENT]] == [
            (event.t_ns, event.node, event.kind) for event in main
        ]
        assert [row.t_ns for row in rows] != [event.t_ns for event in recorded(path)]  # b1 has its own future
    finally:
        table.close()


def test_a_window_of_events_is_indexed_when_the_recording_is_too_long(
    fabric_recording: tuple[Path, dict[str, Any]],
) -> None:
    assert window_for(10, 500, size=1000) == (1, 500)
    assert window_for(10, 5000, size=1000) == (1, 1000)
    assert window_for(3000, 5000, size=1000) == (2500, 3499)
    assert window_for(4990, 5000, size=1000) == (4001, 5000)
    path, _report = fabric_recording
    events = recorded(path)
    table = index_events(path, "main", (101, 300))
    try:
        assert (len(table), table.first_number, table.last_number) == (200, 101, 300)
        assert table.row(0).number == 101 and table.row(0).t_ns == events[100].t_ns
        assert table.row(199).kind == events[299].kind
    finally:
        table.close()
    with pytest.raises(ValueError, match="holds"):
        index_events(path, "main", (1, len(events) + 5))
