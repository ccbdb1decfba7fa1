"""What a user sees when the debugger opens: the cursor at the failure, panes that use a large
terminal's room, the failing rank's streams first; and a recording still being written followed
as it grows (recording/lock.py, Engine.follow)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from tests.tui.harness import screen_text
from tests.tui.test_app import NEEDLE_FAILURE_NS, run_app, settle
from timetravel.explore.session import Session
from timetravel.recording import Recorder
from timetravel.scenarios import get_scenario
from timetravel.sim.launch import Launch
from timetravel.sim.runner import build_world
from timetravel.tui.app import TimeTravelApp
from timetravel.tui.model import KernelSpan, RaceEdge
from timetravel.tui.widgets import EventLog, StreamsView
from timetravel.tui.widgets.status_line import StatusLine
from timetravel.tui.widgets.streams import rank_order, stream_rows

WIDE = (160, 48)


def open_app(
    path: Path, script: Any, size: tuple[int, int] = WIDE, launch: Launch | None = None, **app_args: Any
) -> None:
    run_app(path, script, size, app_args=app_args, launch=launch)


def test_the_debugger_opens_with_the_cursor_at_the_failure(
    needle_recording: tuple[Path, dict[str, Any]],
) -> None:
    path, report = needle_recording
    assert report["failure"]["t_ns"] == NEEDLE_FAILURE_NS

    async def script(pilot: Pilot[Any], app: TimeTravelApp) -> None:
        assert app.view is not None and app.view.cursor_ns == NEEDLE_FAILURE_NS
        assert app.history == ["goto 85.021491ms"]
        assert "at the failure" in app.main.query_one(StatusLine).text
        assert screen_text(app).splitlines()[0].strip().startswith("needle seed 1 · main · 85.021491ms #")

    open_app(path, script, open_at_failure=True)


def test_an_at_moment_wins_over_the_failure(needle_recording: tuple[Path, dict[str, Any]]) -> None:
    path, _report = needle_recording

    async def script(pilot: Pilot[Any], app: TimeTravelApp) -> None:
        assert app.view is not None and app.view.cursor_ns == 10_000_000
        assert app.history == ["goto 10ms"]

    open_app(path, script, open_at_failure=True, first_commands=["goto 10ms"])


def test_at_160x48_the_panes_use_their_room(demo_recording: Path) -> None:
    async def script(pilot: Pilot[Any], app: TimeTravelApp) -> None:
        verdict = "b1: from main at 950ms [drop-fault f2, set reduce_order=canonical] -> FAIL nan:loss on r3"
        app.main.write_output(verdict)
        await pilot.pause()
        text = screen_text(app)
        assert "FAIL nan:loss" in text  # the output pane wraps at its width instead of cutting at 78
        log = app.main.query_one(EventLog)
        assert log.size.width >= 55
        row = next(line for line in text.splitlines() if "gpu.done" in line and "[0, " in line)
        payload = row[row.index("[0, ") :].split("│")[0].rstrip()
        assert len(payload) >= 12, payload  # was just "["
        streams = app.main.query_one("#left-streams", StreamsView)
        assert streams.rows[0][0] == "r3"  # the failing rank first, not r0 r1 r10 r11 ...
        assert [rank for rank, _ in streams.rows[2:]][:4] == ["r0", "r0", "r1", "r1"]

    open_app(demo_recording, script, open_at_failure=True)


def test_stream_rows_put_racing_then_odd_then_busy_ranks_first_in_rank_order() -> None:
    def span(rank: str, start: int, end: int) -> KernelSpan:
        return KernelSpan(rank, "compute", "k", start, end)

    spans = [span(name, 0, 10) for name in ("r0", "r1", "r10", "r11", "r2")] + [span("r3", 20, 30)]
    race = RaceEdge("r11", "buffer", "a", "b")
    assert [rank for rank, _ in stream_rows(spans, [], ())] == ["r0", "r1", "r2", "r3", "r10", "r11"]
    rows = stream_rows(spans, [race], (), preferred=("r3",), t_ns=25)
    assert [rank for rank, _ in rows] == ["r11", "r3", "r0", "r1", "r2", "r10"]
    rows = stream_rows(spans, [], (), t_ns=25)
    assert rows[0][0] == "r3"  # the rank with a kernel running at the cursor
    assert sorted(["r10", "w2", "r2", "r", "w10"], key=rank_order) == ["r", "r2", "r10", "w2", "w10"]


def test_a_recording_in_progress_is_followed_as_it_grows(tmp_path: Path) -> None:
    path = tmp_path / "live.ttr"
    scenario = get_scenario("needle")
    recorder = Recorder(
        scenario, build_world(scenario, scenario.resolve_config({}), 1), path, snapshot_every_events=64
    )
    recorder.run(max_events=200)
    recorder.flush()
    try:

        async def script(pilot: Pilot[Any], app: TimeTravelApp) -> None:
            view = app.view
            assert view is not None and view.in_progress
            assert "recording in progress" in view.status
            first_events = view.events_total
            recorder.run(max_events=300)
            recorder.flush()
            app._follow_recording()
            await settle(pilot)
            assert app.view is not None and app.view.in_progress
            assert app.view.events_total > first_events
            recorder.finish(recorder.run())
            app._follow_recording()
            await settle(pilot)
            assert app.view is not None and not app.view.in_progress
            with Session.open(path) as session:
                assert app.view.events_total == session.end.events
                assert session.info.failure is not None
            assert "✖" in app.view.status
            assert "the recording is finished" in app.main.query_one(StatusLine).text
            app._follow_recording()  # finished: nothing more to follow
            assert app.is_idle

        open_app(path, script, size=(100, 30))
    finally:
        recorder.abort()
