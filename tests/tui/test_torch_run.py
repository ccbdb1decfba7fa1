"""The TUI on a recording of the user's own torch script (docs/examples/torch/ddp_mlp.py, 3 ranks,
r1's contribution to a collective dropped: a hang): the timeline's rank rows with collectives and
optimizer steps, the loss captured from backward, the flight recorder at the hang, the FAIL line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)
from textual.pilot import Pilot
from torch_launch import TEST_SCRIPTS

from tests.test_torch_time_travel import record
from tests.tui.harness import screen_text
from tests.tui.test_app import settle, type_command
from tests.tui.test_opening_and_following import open_app
from timetravel.explore.session import Session
from timetravel.sim.timefmt import format_time
from timetravel.tui.rank_lanes import collective_lanes
from timetravel.tui.widgets import FlightRecorder, Timeline

DROP_AT_NS = 1_000_000


@pytest.fixture(scope="module")
def hang_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tui_torch") / "drop.ttr"
    faults = [{"kind": "drop", "target": "r1", "t_start": DROP_AT_NS}]
    report = record(path, "args=--steps 9", f"faults={json.dumps(faults)}", seed=0)
    assert report["failure"]["kind"] == "hang"
    return path


def test_the_lanes_are_each_rank_s_collectives_and_steps_from_the_recorded_events(
    hang_recording: Path,
) -> None:
    with Session.open(hang_recording, launch=TEST_SCRIPTS) as session:
        ranks, spans, steps = collective_lanes(session)
    assert ranks == ("r0", "r1", "r2")
    assert [(mark.rank, mark.step) for mark in steps if mark.rank == "r0"] == [("r0", 1), ("r0", 2)]
    hung = {(span.rank, span.label) for span in spans if span.t_end_ns is None}
    assert ("r0", "all_reduce 0#9") in hung and ("r2", "all_reduce 0#9") in hung  # waiting at the end
    done = [span for span in spans if span.rank == "r0" and span.t_end_ns is not None]
    assert [span.seq for span in done] == list(range(1, 9))  # every collective before, in order
    assert all(span.t_start_ns <= span.t_end_ns for span in done if span.t_end_ns is not None)


def test_at_the_hang_the_screen_shows_lanes_loss_flight_recorder_and_the_fail_line(
    hang_recording: Path,
) -> None:
    async def script(pilot: Pilot[Any], app: Any) -> None:
        text = screen_text(app)
        timeline = app.main.query_one(Timeline)
        assert timeline.data.lanes == ("r0", "r1", "r2")
        failure = [mark for mark in timeline.data.marks if mark.kind == "failure"]
        assert [mark.t_ns for mark in failure] == [timeline.data.t_end_ns]  # the hang, at the branch's end
        end_ns = timeline.data.t_end_ns  # the last event: the last of r0, r2 entering 0#9 after the drop
        assert DROP_AT_NS < end_ns < DROP_AT_NS + 200_000
        assert failure[0].label.endswith(f"(after the last event, at {format_time(end_ns, 'ms')})")
        assert "no loss metric" not in text  # the loss backward was called on, captured
        lines = text.splitlines()
        assert any(line.lstrip().startswith("r0 ") and "━" in line for line in lines)
        flight = app.main.query_one(FlightRecorder)
        assert flight.display and flight.border_title == "flight recorder · hang on r1"
        assert flight.border_subtitle == f"waiting since {format_time(end_ns, 'ms')}"  # the last entry
        rows = {row.rank: flight.row_text(row) for row in flight.rows}
        assert rows["r0"] == "r0   waiting  in 0#9 all_reduce(sum) float32[]  done 0#8  waits on r1"
        assert rows["r1"].startswith("r1   waiting  in -  done 0#8 all_reduce(sum) float32[577]")
        assert "◀ r0,r2 wait for it" in rows["r1"]
        assert "◀ r0,r2 wait for it" in text
        assert "FAIL hang:torch.collective.hang on r1" in " ".join(text.split())  # the output pane
        await type_command(pilot, "goto 0.5ms")
        await settle(pilot)
        assert not app.main.query_one(FlightRecorder).display  # before the hang: no flight recorder

    open_app(hang_recording, script, open_at_failure=True, launch=TEST_SCRIPTS)


def test_compare_reference_from_the_command_line_overlays_the_real_run_in_the_compare_screen(
    hang_recording: Path, tmp_path: Path
) -> None:
    from timetravel.tui.widgets import CompareView
    from timetravel.tui.widgets.loss_plot import LossPlot

    with Session.open(hang_recording, launch=TEST_SCRIPTS) as session:
        losses = [value for _t, node, value in session.metric_series("loss") if node == "r0"]
    assert len(losses) == 2  # two optimizer steps before the hang, captured from backward
    reference = tmp_path / "real_run.csv"
    reference.write_text(f"step,loss\n1,{losses[0]!r}\n2,{losses[1] * 1.5!r}\n")

    async def script(pilot: Pilot[Any], app: Any) -> None:
        app.submit_command(f"compare main main --reference {reference} --rtol 0.01")
        await settle(pilot)
        view = app.screen.query_one(CompareView)
        header = view.header_text().plain
        wanted = f"reference vs main: first step outside rtol 0.01: 2 (ref {losses[1] * 1.5:.8g}, sim {losses[1]:.8g})"
        assert header.count(wanted) == 2  # one verdict a branch
        plot = view.query_one(LossPlot)
        assert plot.by_step and plot.reference == ((1, losses[0]), (2, losses[1] * 1.5))
        assert plot.curve_a == ((1, losses[0]), (2, losses[1]))
        assert "× reference" in str(plot.border_title)

    open_app(hang_recording, script)
