"""The used-by flow, through the keys: open a failing seed, go to just after the failure, rewind,
branch a new future, compare the two, open the diff — asserting what each widget shows.

The seed is needle seed 0 with six decoy faults (the shell's and docs/tui.md's example): a
worker's ack is dropped by fault f4 at 76 ms, it restarts (f5) and applies the resent round twice,
and the leader fails it at 77.022955 ms. Rewinding to 70 ms and branching without f4 gives a
future that passes; the two runs first differ at f4's own event.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from tests.tui.harness import screen_text
from tests.tui.test_app import run_app, settle, type_command
from timetravel.explore.paths import get
from timetravel.explore.session import Session
from timetravel.tui.app import TimeTravelApp
from timetravel.tui.screens import CompareScreen, DiffScreen
from timetravel.tui.widgets import BranchTree, CompareView, EventLog, StateInspector, Timeline
from timetravel.tui.widgets.status_line import StatusLine

ROOT_CAUSE = "f4"
ROOT_CAUSE_NS = 76_000_000
REWIND_NS = 70_000_000


def position(path: Path, moment: str, branch: str = "main") -> tuple[int, int]:
    with Session.open(path, branch=branch) as session:
        session.goto(moment)
        return session.position.events, session.position.t_ns


def test_open_rewind_branch_compare_and_diff(story: Path) -> None:
    async def flow(pilot: Pilot[Any], app: TimeTravelApp) -> None:
        main = app.main
        timeline, log, status = main.query_one(Timeline), main.query_one(EventLog), main.query_one(StatusLine)

        await type_command(pilot, "goto 77")
        await settle(pilot)
        events, _t_ns = position(story, "77")
        assert (timeline.cursor_ns, log.selected_row.number) == (77_000_000, events)  # type: ignore[union-attr]
        assert screen_text(app).splitlines()[0].strip() == (
            f"needle seed 0 · main · 77ms #{events} · ✖ assertion on w3 @77.022955ms"
        )

        await type_command(pilot, "goto 70")
        await settle(pilot)
        events, _t = position(story, "70")
        assert app.view is not None and (app.view.cursor_ns, app.view.event_number) == (REWIND_NS, events)
        assert main.query_one(StateInspector).document["t_ns"] == REWIND_NS

        await type_command(pilot, f"branch --drop-fault {ROOT_CAUSE}")
        await settle(pilot)
        assert status.text.startswith(f"b1: from main at 70ms [drop-fault {ROOT_CAUSE}] -> pass")
        tree = main.query_one(BranchTree)
        assert [(b.name, b.parent, b.at_ns, b.outcome, b.changes) for b in tree.branches] == [
            ("main", None, None, "fail", ""),
            ("b1", "main", REWIND_NS, "pass", f"drop-fault {ROOT_CAUSE}"),
        ]
        assert [(m.t_ns, m.label) for m in timeline.data.marks if m.kind == "branch"] == [(REWIND_NS, "b1")]
        assert main.active_pane == "branches" and app.view.cursor_ns == REWIND_NS, "the cursor stays"

        await pilot.press("4", "down", "c")  # highlight b1, compare it with main
        await settle(pilot)
        assert isinstance(app.screen, CompareScreen)
        data = app.screen.query_one(CompareView).data
        assert data is not None
        assert (data.a.name, data.a.outcome, data.b.name, data.b.outcome) == ("main", "fail", "b1", "pass")
        divergence = data.first_divergence
        assert divergence is not None and (divergence.t_ns, divergence.kind, divergence.node) == (
            ROOT_CAUSE_NS,
            "fault",
            "w3",
        )
        with Session.open(story, branch="main") as session:
            fault = session.event(divergence.event_a or 0)
        assert fault is not None and (fault.kind, fault.payload["id"]) == ("fault", ROOT_CAUSE)
        assert data.at_ns == ROOT_CAUSE_NS and data.entries
        assert app.history[-2:] == ["compare main b1", "diff main b1"]

        first = data.entries[0]
        await pilot.press("enter")  # the first differing path
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        screen = app.screen
        assert (screen.names, screen.path, screen.at_ns) == (("main", "b1"), first.path, ROOT_CAUSE_NS)
        assert first.path in screen.differing
        assert app.history[-1] == f"diff main b1 --path {first.path}"
        left, right = screen.query(StateInspector)
        assert left.document is screen.documents[0] and right.document is screen.documents[1]
        assert left.cursor_path == right.cursor_path == first.path
        with Session.open(story, branch="main") as session:
            session.goto(f"#{divergence.event_a}")
            expected_a = get(session.world.to_data(), first.path)
        with Session.open(story, branch="b1") as session:
            session.goto(f"#{divergence.event_b}" if divergence.event_b is not None else ROOT_CAUSE_NS - 1)
            expected_b = get(session.world.to_data(), first.path)
        assert (
            get(screen.documents[0], first.path)
            == expected_a
            != expected_b
            == get(screen.documents[1], first.path)
        )

        await pilot.press("escape", "escape")
        assert app.screen is main

    run_app(story, flow, size=(100, 30))
