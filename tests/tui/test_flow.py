"""The used-by flow, through the keys: open the demo failing seed, go to T=1000 ms, rewind to 950,
branch a new future without the root-cause fault, compare the two, open the diff of the corrupted
gradient — asserting what each widget shows.

The recording is dp_training's demo preset at its own seed (``DEMO_SEED``, pinned by dp_training's
tests): a bit flip in one rank's gradient just before 1000 ms makes that rank's replica drift, and
the divergence detector fails the run a few steps later. Which fault is the flip is read from the
recording by the demo's own definition (docs/scenarios/dp_training.md): the ``corrupt`` fault on
buffer ``grad`` of the failing rank that starts between 950 and 1000 ms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from textual.pilot import Pilot

from tests.tui.conftest import DEMO_FAULT_AFTER_NS, DEMO_FAULT_BEFORE_NS
from tests.tui.harness import screen_text
from tests.tui.test_app import run_app, settle, type_command
from timetravel.explore.paths import get
from timetravel.explore.session import Session
from timetravel.tui.app import TimeTravelApp
from timetravel.tui.screens import CompareScreen, DiffScreen
from timetravel.tui.widgets import BranchTree, CompareView, EventLog, RankGrid, StateInspector, Timeline
from timetravel.tui.widgets.status_line import StatusLine

GOTO_NS = 1_000_000_000
REWIND_NS = 950_000_000


def root_cause(path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """The demo's failure and its root-cause fault record, read from the recording."""
    with Session.open(path) as session:
        failure = session.info.failure
        assert failure is not None
        candidates = [
            fault
            for fault in session.world.faults
            if fault["kind"] == "corrupt"
            and fault["params"].get("buffer") == "grad"
            and fault["target"] == failure["node"]
            and DEMO_FAULT_AFTER_NS < fault["t_start"] < DEMO_FAULT_BEFORE_NS
        ]
    assert len(candidates) == 1, candidates
    return failure, candidates[0]


def same(a: Any, b: Any) -> bool:
    """Equal values, arrays bit for bit (a corrupted gradient differs in one element's bit)."""
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.tobytes() == b.tobytes()
    return bool(a == b)


def position(path: Path, moment: str) -> int:
    with Session.open(path) as session:
        session.goto(moment)
        return session.position.events


def test_open_the_demo_seed_rewind_branch_compare_and_diff(demo: Path) -> None:
    failure, cause = root_cause(demo)
    rank, fault = failure["node"], cause["id"]

    async def flow(pilot: Pilot[Any], app: TimeTravelApp) -> None:
        main = app.main
        timeline, log, status = main.query_one(Timeline), main.query_one(EventLog), main.query_one(StatusLine)

        await type_command(pilot, "goto 1000")
        await settle(pilot)
        assert (timeline.cursor_ns, log.selected_row.number) == (GOTO_NS, position(demo, "1000"))  # type: ignore[union-attr]
        cells = {cell.name: cell for cell in main.query_one(RankGrid).cells}
        assert [name for name, cell in cells.items() if cell.state != "healthy"] == [rank]
        assert cells[rank].state == "diverged", "at 1000 ms the flipped rank's weights already differ"
        assert screen_text(app).splitlines()[0].startswith(" dp_training seed ")

        await type_command(pilot, "goto 950")
        await settle(pilot)
        assert app.view is not None and (app.view.cursor_ns, app.view.event_number) == (
            REWIND_NS,
            position(demo, "950"),
        )
        assert {cell.state for cell in main.query_one(RankGrid).cells} == {"healthy"}, "before the flip"
        assert main.query_one(StateInspector).document["t_ns"] == REWIND_NS

        await type_command(pilot, f"branch --drop-fault {fault}")
        await settle(pilot)
        assert status.text.startswith(f"b1: from main at 950ms [drop-fault {fault}] -> pass")
        tree = main.query_one(BranchTree)
        assert [(b.name, b.parent, b.at_ns, b.outcome) for b in tree.branches] == [
            ("main", None, None, "fail"),
            ("b1", "main", REWIND_NS, "pass"),
        ]
        assert [(m.t_ns, m.label) for m in timeline.data.marks if m.kind == "branch"] == [(REWIND_NS, "b1")]

        await pilot.press("4", "down", "c")  # highlight b1, compare it with main
        await settle(pilot)
        assert isinstance(app.screen, CompareScreen)
        data = app.screen.query_one(CompareView).data
        assert data is not None
        assert (data.a.outcome, data.b.outcome) == ("fail", "pass")
        divergence = data.first_divergence
        assert divergence is not None
        assert (divergence.t_ns, divergence.kind, divergence.node) == (cause["t_start"], "fault", rank)
        assert app.history[-2:] == ["compare main b1", "diff main b1"]
        corrupted = f"nodes/{rank}/grad_pending"
        paths = [entry.path for entry in data.entries]
        assert corrupted in paths, "the flipped gradient is among the differing paths"

        await pilot.press(*["down"] * paths.index(corrupted), "enter")
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        screen = app.screen
        assert (screen.names, screen.path, screen.at_ns) == (("main", "b1"), corrupted, cause["t_start"])
        assert corrupted in screen.differing
        assert app.history[-1] == f"diff main b1 --path {corrupted}"
        left, right = screen.query(StateInspector)
        assert left.cursor_path == right.cursor_path == corrupted
        expected = []
        for branch, event in (("main", divergence.event_a), ("b1", divergence.event_b)):
            with Session.open(demo, branch=branch) as session:
                session.goto(f"#{event}" if event is not None else cause["t_start"] - 1)
                expected.append(get(session.world.to_data(), corrupted))
        shown = [get(document, corrupted) for document in screen.documents]
        assert same(shown[0], expected[0]) and same(shown[1], expected[1]) and not same(shown[0], shown[1])

        await pilot.press("escape", "escape")
        assert app.screen is main

    run_app(demo, flow, size=(120, 36))
