"""The explain pane (issue 15): ``y`` (or ``:explain``) shows the causal chain of the failure; choosing
a link moves the cursor to that link's event."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual import on
from textual.pilot import Pilot

from tests.tui.harness import Harness, drive
from tests.tui.test_app import run_app, settle
from timetravel.tui.app import TimeTravelApp
from timetravel.tui.widgets.explain_pane import ExplainPane, ExplainRow


class ExplainHarness(Harness):
    @on(ExplainPane.LinkChosen)
    def keep(self, message: ExplainPane.LinkChosen) -> None:
        self.messages.append(message)


def test_the_pane_lists_the_links_and_posts_the_chosen_one() -> None:
    pane = ExplainPane()
    app = ExplainHarness(pane)
    rows = (
        ExplainRow(
            "detector", 66, 21_022_267, "#66 21.022267ms leader ack", "the detector fired (assertion)"
        ),
        ExplainRow(
            "fault", 54, 20_000_000, "#54 20ms w1 fault", "fault f4 (drop) acted", ("nodes/w1/x: 1 -> 2",)
        ),
        ExplainRow("root", None, None, "fault record", "f4 drop w1: a fault record"),
    )

    async def scenario(pilot: Pilot[Any]) -> None:
        pane.branch = "b1"
        pane.rows = rows
        await pilot.pause()
        assert pane.option_count == 3
        pane.focus()
        await pilot.press("down", "enter")
        await pilot.pause()
        await pilot.press("down", "enter")  # a record with neither event nor time: nothing to go to
        await pilot.pause()

    drive(app, scenario)
    chosen = app.posted(ExplainPane.LinkChosen)
    assert [(m.branch, m.event, m.t_ns) for m in chosen] == [("b1", 54, 20_000_000)]


def test_y_explains_the_failure_and_a_link_moves_the_cursor(
    needle_recording: tuple[Path, dict[str, Any]],
) -> None:
    path, _report = needle_recording

    async def scenario(pilot: Pilot[Any], app: TimeTravelApp) -> None:
        await pilot.press("y")
        await settle(pilot)
        assert app.main.active_pane == "explain"
        pane = app.main.query_one(ExplainPane)
        assert pane.rows and pane.rows[0].role == "detector" and pane.rows[-1].role == "root"
        assert "FAIL" in pane.headline
        assert isinstance(app.focused, ExplainPane)
        fault = next(index for index, row in enumerate(pane.rows) if row.role == "fault")
        pane.highlighted = fault
        await pilot.press("enter")
        await settle(pilot)
        assert app.view is not None and app.view.event_number == pane.rows[fault].event
        assert app.history[-1] == f"goto #{pane.rows[fault].event} --branch main"

    run_app(path, scenario, size=(120, 36))
