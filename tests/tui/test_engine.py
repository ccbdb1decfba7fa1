"""Engine: every gesture is a command line run by the explore engine; the view follows the Session."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.fabric_example import SCENARIO as FABRIC_EXAMPLE
from tests.tui.conftest import BRANCH_FORK_EVENT
from timetravel.explore.commands import open_context
from timetravel.explore.results import CursorResult
from timetravel.explore.session import Session
from timetravel.explore.work import WorkProgress
from timetravel.sim.timefmt import parse_time
from timetravel.tui.engine import Engine, is_long, progress_text

NEEDLE_FAILURE_NS = 85_021_491
"""needle seed 1 fails with an assertion on w0 at 85.021491 ms (the run's report says so too)."""


@pytest.fixture
def needle(needle_recording: tuple[Path, dict[str, Any]]) -> Any:
    path, _report = needle_recording
    with open_context(path) as context:
        yield Engine(context)


@pytest.fixture
def fabric(fabric_recording: tuple[Path, dict[str, Any]]) -> Any:
    """The engine over the fabric recording (main and branch b1), and the recording's path."""
    path, _report = fabric_recording
    with open_context(path, scenario=FABRIC_EXAMPLE) as context:
        yield Engine(context), path


def test_the_first_view_is_the_start_of_the_run_with_its_faults_and_failure(
    needle: Engine, needle_recording: tuple[Path, dict[str, Any]]
) -> None:
    _path, report = needle_recording
    assert report["failure"]["t_ns"] == NEEDLE_FAILURE_NS
    view = needle.view()
    assert (view.title, view.branch, view.cursor_ns, view.event_number) == ("needle seed 1", "main", 0, 0)
    assert view.events_total == report["events"]
    assert view.timeline.t_end_ns == NEEDLE_FAILURE_NS
    assert view.status == "✖ assertion on w0 @85.021491ms"
    failures = [mark for mark in view.timeline.marks if mark.kind == "failure"]
    assert [(mark.t_ns, mark.label) for mark in failures] == [
        (NEEDLE_FAILURE_NS, "assertion on w0 @85.021491ms")
    ]
    faults = [mark for mark in view.timeline.marks if mark.kind == "fault"]
    before_end = [fault for fault in needle.session.world.faults if fault["t_start"] <= NEEDLE_FAILURE_NS]
    assert [(mark.t_ns, mark.label.split()[0]) for mark in faults] == [
        (fault["t_start"], fault["id"]) for fault in sorted(before_end, key=lambda fault: fault["t_start"])
    ]
    assert [cell.name for cell in view.ranks] == [f"w{index}" for index in range(8)]
    assert set(view.document["nodes"]) == set(needle.session.world.nodes)


def test_goto_moves_the_session_and_brings_a_view_where_nothing_moved_brings_none(needle: Engine) -> None:
    outcome = needle.execute("goto 80")
    assert outcome.error is None and outcome.lines == ("goto 80",)
    assert isinstance(outcome.result, CursorResult) and outcome.result.t_ns == 80_000_000
    assert outcome.text[0].startswith("main at 80ms, event #")
    view = outcome.view
    assert view is not None
    assert (view.cursor_ns, view.event_number) == (80_000_000, needle.session.position.events)
    assert needle.execute("where").view is None
    back = needle.execute("goto 75").view
    assert back is not None and back.cursor_ns == 75_000_000 and back.event_number < view.event_number


def test_the_inspector_gets_a_copy_that_later_seeks_do_not_change(needle: Engine) -> None:
    view = needle.execute("goto 80").view
    assert view is not None
    before = {name: dict(state) for name, state in view.document["nodes"].items()}
    needle.execute("goto 20")
    assert {name: dict(state) for name, state in view.document["nodes"].items()} == before
    assert view.document["t_ns"] == 80_000_000


def test_a_bad_line_is_one_error_line_and_leaves_the_cursor(needle: Engine) -> None:
    needle.execute("goto 40")
    outcome = needle.execute("goto soon")
    assert outcome.view is None and outcome.results == ()
    assert outcome.error is not None and "soon" in outcome.error and "\n" not in outcome.error
    assert needle.execute("print nodes/nobody").error is not None
    assert needle.session.position.t_ns == 40_000_000


def test_long_commands_are_the_ones_whose_spec_says_so() -> None:
    assert [is_long(line) for line in ("goto 950", "branch --drop-fault f3", "minimize", "print x", "")] == [
        False,
        True,
        True,
        False,
        False,
    ]
    assert is_long("compare main b1") and is_long("find-first nonfinite(nodes/*/weights)")


def test_progress_reads_the_engine_and_the_minimizer_reports() -> None:
    assert progress_text(WorkProgress("branch b1", 250, 1000), "branch") == ("branch b1 250/1,000", 0.25)
    assert progress_text(WorkProgress("divergence", 3, 4, "bisect"), "x") == ("divergence 3/4 bisect", 0.75)

    class MinimizerProgress:
        runs, seconds, pass_name, faults, choices_nonzero, accepted = 12, 1.5, "ddmin", 3, 0, 2

    assert progress_text(MinimizerProgress(), "minimize") == (
        "minimize: 12 runs · pass ddmin · 3 faults",
        None,
    )
    assert progress_text(object(), "fanout") == ("fanout", None)


def test_switching_branch_shows_the_branch_and_its_fork_on_mains_timeline(
    fabric: tuple[Engine, Path],
) -> None:
    engine, path = fabric
    main = engine.view()
    forks = [mark for mark in main.timeline.marks if mark.kind == "branch"]
    with Session.open(path, scenario=FABRIC_EXAMPLE) as session:
        session.goto(f"#{BRANCH_FORK_EVENT}")
        fork_ns = session.position.t_ns
    assert [(mark.t_ns, mark.label) for mark in forks] == [(fork_ns, "b1")]
    assert [(row.name, row.parent, row.at_ns) for row in main.branches] == [
        ("main", None, None),
        ("b1", "main", fork_ns),
    ]
    outcome = engine.execute("goto 300us --branch b1")
    view = outcome.view
    assert outcome.error is None and view is not None
    assert (view.branch, view.cursor_ns) == ("b1", parse_time("300us"))
    assert view.timeline.t_end_ns == engine.session.end.t_ns != main.timeline.t_end_ns


def test_a_diff_screen_world_is_read_without_moving_the_cursor(fabric: tuple[Engine, Path]) -> None:
    engine, path = fabric
    engine.execute("goto 100us")
    at_ns = parse_time("500us")
    main_world = engine._document_at("main", at_ns)
    branch_world = engine._document_at("b1", at_ns)
    assert engine.session.position.t_ns == 100_000
    assert main_world["t_ns"] == branch_world["t_ns"] == at_ns
    with Session.open(path, scenario=FABRIC_EXAMPLE, branch="b1") as session:
        session.goto_time(at_ns)
        expected = session.world.nodes["r0"]["buffers"]["weights"]
    assert np.array_equal(branch_world["nodes"]["r0"]["buffers"]["weights"], expected)
