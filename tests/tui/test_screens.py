"""The screens at fixed sizes: the main screen (narrow and wide), compare, diff and the key map."""

from __future__ import annotations

from typing import Any

from textual.app import App

from tests.tui import sample
from tests.tui.harness import assert_snapshot, drive, screen_text
from timetravel.scenarios import get_scenario
from timetravel.tui.feed import EventTable, run_with_events
from timetravel.tui.keymap_screen import KeyMapScreen
from timetravel.tui.screens import CompareScreen, DiffScreen, MainScreen
from timetravel.tui.widgets import CommandLine, EventLog, RankGrid, StateInspector, StreamsView

MS = sample.MS


def pingpong_table() -> EventTable:
    scenario = get_scenario("pingpong")
    _world, events = run_with_events(scenario, scenario.resolve_config(["rounds=200"]), 3)
    return EventTable(events)


class ScreenHost(App[None]):
    """Shows one screen, as the App will."""

    def __init__(self, screen: Any) -> None:
        super().__init__()
        self.first_screen = screen

    def on_mount(self) -> None:
        self.push_screen(self.first_screen)


def run_main(scenario, size=(80, 24)) -> None:
    screen = MainScreen()
    app = ScreenHost(screen)

    async def wrapped(pilot) -> None:
        screen.show(sample.cursor_view(pingpong_table()))
        await pilot.pause()
        await scenario(pilot, app, screen)

    drive(app, wrapped, size)


def test_main_screen_at_80x24_shows_timeline_ranks_and_one_pane() -> None:
    async def scenario(pilot, app, screen: MainScreen) -> None:
        assert not screen.is_wide
        visible = [pane.id for pane in screen.query_one("#panes").children if pane.display]
        assert visible == ["events"]
        text = screen_text(app)
        assert text.splitlines()[0].strip() == (
            "dp_training seed 17 · main · 1000ms #48,800 · ✖ nan on rank5 @1040ms"
        )
        assert "ranks · state" in text and "events 401" in text
        assert_snapshot(app, "main_80x24")

    run_main(scenario)


def test_main_screen_uses_a_large_terminal_for_more_panes() -> None:
    async def scenario(pilot, app, screen: MainScreen) -> None:
        assert screen.is_wide
        visible = [pane.id for pane in screen.query_one("#panes").children if pane.display]
        assert visible == ["events", "state", "branches", "output"]
        assert screen.query_one("#left-streams", StreamsView).display
        assert_snapshot(app, "main_160x48")

    run_main(scenario, size=(160, 48))


def test_number_keys_switch_panes_and_a_chosen_rank_opens_in_the_inspector() -> None:
    async def scenario(pilot, app, screen: MainScreen) -> None:
        await pilot.press("4")
        assert screen.active_pane == "branches" and app.focused is screen.query_one("#branches")
        await pilot.press("g")
        assert isinstance(app.focused, RankGrid)
        await pilot.press("enter")  # the first cell is the outlier, rank5
        await pilot.pause()
        inspector = screen.query_one(StateInspector)
        assert screen.active_pane == "state" and app.focused is inspector
        assert inspector.cursor_path == "nodes/rank5"
        assert screen.query_one("#streams", StreamsView).focus_ranks == ("rank5",)
        assert_snapshot(app, "main_rank5_state")

    run_main(scenario)


def test_event_log_follows_the_view_cursor() -> None:
    async def scenario(pilot, app, screen: MainScreen) -> None:
        log = screen.query_one(EventLog)
        assert log.selected == len(log.view) - 1  # every pingpong event is before 1000 ms
        line = screen.query_one(CommandLine)
        assert line.completions("diff main b") == ["diff main b1 ", "diff main b2 ", "diff main b3 "]

    run_main(scenario)


def test_compare_screen_snapshot() -> None:
    app = ScreenHost(CompareScreen(sample.compare_data()))

    async def scenario(pilot) -> None:
        await pilot.pause()
        assert_snapshot(app, "compare_80x24")

    drive(app, scenario)


def test_diff_screen_opens_both_worlds_at_the_path_with_the_differences_marked() -> None:
    import numpy as np

    good = sample.world_document()
    good["nodes"]["rank5"]["weights"] = np.linspace(-0.5, 0.5, 64, dtype=np.float32)
    bad = sample.world_document()
    bad["nodes"]["rank5"]["weights"] = np.full(64, np.nan, dtype=np.float32)
    screen = DiffScreen(("main", "b1"), (bad, good), "nodes/rank5", ["nodes/rank5/weights"], sample.FAULT_NS)
    app = ScreenHost(screen)

    async def scenario(pilot) -> None:
        await pilot.pause()
        left, right = screen.query(StateInspector)
        assert left.cursor_path == right.cursor_path == "nodes/rank5"
        assert any(label.startswith("● weights f32[64] nan 64") for label in left.visible_labels())
        assert any(
            label.startswith("● weights f32[64]") and "nan" not in label for label in right.visible_labels()
        )
        assert_snapshot(app, "diff_80x24")

    drive(app, scenario)


def test_key_map_screen_lists_every_scope() -> None:
    rows = [("timeline", "←", "back"), ("ranks", "m", "mode")]
    app = ScreenHost(KeyMapScreen(rows))

    async def scenario(pilot) -> None:
        await pilot.pause()
        text = screen_text(app)
        assert "timeline" in text and "mode" in text
        await pilot.press("escape")
        assert not isinstance(app.screen, KeyMapScreen)

    drive(app, scenario)


def test_status_line_says_answers_errors_and_progress() -> None:
    from timetravel.tui.widgets.status_line import StatusLine

    status = StatusLine()

    class Host(App[None]):
        def compose(self):
            yield status

    app = Host()

    async def scenario(pilot) -> None:
        status.say("main at 950ms, event #48,000")
        assert status.text == "main at 950ms, event #48,000" and not status.has_class("-error")
        status.error("goto: 'x': not a time")
        assert status.has_class("-error")
        status.busy("branch b1", 0.4)
        await pilot.pause()
        assert status.is_busy and status.text == "branch b1 · esc cancels"
        assert status.query_one("ProgressBar").percentage == 0.4
        status.idle()
        assert not status.is_busy

    drive(app, scenario)
