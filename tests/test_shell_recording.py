"""The shell over a real recording: completion from the recording, plot per branch, the REPL, an
interrupted command, a replay mismatch. The expected values are read from the recording through
the Session (an independent path), never copied from the shell's output."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import scenario_fixtures
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console
from scenario_fixtures import NONDETERMINISTIC
from shell_recordings import BRANCH, FORK_EVENTS

from timetravel.explore import Session
from timetravel.explore.commands import CommandContext, Invocation, open_context
from timetravel.explore.commands import run as language_run
from timetravel.explore.results import CursorResult
from timetravel.recording import record_run
from timetravel.shell import CommandRunner, Repl, Status, prompt_text
from timetravel.shell.completer import ShellCompleter
from timetravel.shell.language import LanguageEngine, recording_engine
from timetravel.shell.results import PlotResult
from timetravel.sim.timefmt import format_time

MS = 1_000_000
ENTER = "\r"
CTRL_D = "\x04"


@pytest.fixture
def context(needle_recording: Path) -> Iterator[CommandContext]:
    with open_context(needle_recording) as opened:
        yield opened


def completions(engine: LanguageEngine, text: str) -> list[tuple[str, str]]:
    """(text, meta) of each completion prompt_toolkit would show for ``text``."""
    completer = ShellCompleter(engine.vocabulary, engine.completion_source)
    found = completer.get_completions(Document(text), CompleteEvent(completion_requested=True))
    return [(item.text, item.display_meta_text) for item in found]


def test_completion_offers_the_recordings_nodes_paths_faults_and_settings(context: CommandContext) -> None:
    engine = recording_engine(context)
    world = context.session.world
    assert sorted(text for text, _ in completions(engine, "events --node ")) == sorted(world.nodes)
    assert completions(engine, "events --node lead") == [("leader", world.roles["leader"])]
    assert [text for text, _ in completions(engine, "print nodes/w3/")] == [
        f"nodes/w3/{key}" for key in world.nodes["w3"]
    ]
    planted = next(fault for fault in world.faults if fault["kind"] == "drop")
    assert completions(engine, f"branch --drop-fault {planted['id']}")[0] == (
        planted["id"],
        f"drop {planted['target']}",
    )
    help_of = {param.name: param.help for param in context.session.scenario.params}
    assert completions(engine, "branch --set bu") == [("bug=", help_of["bug"])]
    assert [text for text, _ in completions(engine, "plot --metric ")] == context.session.metric_names()


def test_completion_offers_branches_with_their_outcomes_and_times_of_the_cursors_branch(
    context: CommandContext,
) -> None:
    engine = recording_engine(context)
    assert completions(engine, "goto 1 --branch ") == [("main", "fail"), (BRANCH, "pass")]
    assert completions(engine, "compare main f") == [(BRANCH, "pass")]
    session = context.session
    unit = session.display_unit
    snapshots = [(format_time(info.t_ns, unit), f"snapshot {info.index}") for info in session.snapshots()]
    failure_at = format_time(session.info.failure["t_ns"], unit)
    assert session.info.failure["t_ns"] == session.end.t_ns  # needle stops at its failure
    expected = dict(snapshots)  # in time order; the final snapshot's time is the failure's
    expected[failure_at] = "failure, end"
    assert completions(engine, "goto ") == list(expected.items())

    engine.execute(f"goto 80 --branch {BRANCH}")
    with Session.open(context.session.reader.path, branch=BRANCH) as fixed:
        fixed_end = format_time(fixed.end.t_ns, unit)
    assert (fixed_end, "end") in completions(engine, "goto ")
    assert (failure_at, "failure, end") not in completions(engine, "goto ")


def test_plot_draws_each_branch_from_its_own_metric_series(
    context: CommandContext, needle_recording: Path
) -> None:
    engine = recording_engine(context)
    result = engine.execute(f"plot main {BRANCH} --metric round_done_ns")
    assert isinstance(result, PlotResult)
    assert [curve.label for curve in result.series] == ["main", BRANCH]
    rounds = context.session.info.config["rounds"]
    for curve in result.series:
        with Session.open(needle_recording, branch=curve.label) as session:
            rows = session.metric_series("round_done_ns")
            ended_at = session.end.t_ns
        assert {row[1] for row in rows} == {"leader"}  # one node records it: a point per row
        assert list(curve.points) == [(row[0], float(row[2])) for row in rows]
        assert curve.points[-1][0] <= ended_at
    main_points, fixed_points = (len(curve.points) for curve in result.series)
    assert fixed_points == rounds  # the fixed future passes: every round completes, once
    assert main_points < rounds  # main fails before its last round


def run_repl(engine: LanguageEngine, keys: str) -> str:
    out = io.StringIO()
    runner = CommandRunner(engine, Console(file=out, width=120, color_system=None))
    with create_pipe_input() as pipe:
        repl = Repl(runner, None, pipe, DummyOutput())
        pipe.send_text(keys)
        assert repl.run() == 0
    return out.getvalue()


def test_the_repl_moves_the_cursor_and_prints_the_state_there(
    context: CommandContext, needle_recording: Path
) -> None:
    with Session.open(needle_recording) as session:
        position = session.goto(20 * MS)
        total = session.world.nodes["w3"]["total"]
        events = session.end.events
    engine = recording_engine(context)
    assert prompt_text(engine.prompt_state()) == "[main 0ms #0]> "
    out = run_repl(engine, f"goto 20{ENTER}print nodes/w3/total{ENTER}{CTRL_D}")
    assert f"main  20ms  event #{position.events} of {events}" in out
    assert f"total  int  {total}" in out
    assert prompt_text(engine.prompt_state()) == f"[main 20ms #{position.events}]> "


def test_an_interrupted_command_leaves_the_cursor_where_it_was(
    context: CommandContext, needle_recording: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ctrl-C in the middle of a seek: the world may be half way through an event. The engine
    reopens the recording and puts the cursor back, with the state the recording vouches for."""

    def interrupted_step(invocation: Invocation, context: CommandContext) -> Any:
        context.session.goto("#300")
        context.session.world.nodes["w3"]["total"] = -1  # half an event's writes
        raise KeyboardInterrupt

    engine = recording_engine(context)
    out = io.StringIO()
    runner = CommandRunner(engine, Console(file=out, color_system=None))
    assert runner.run_one("goto #150") is Status.OK
    monkeypatch.setitem(language_run.HANDLERS, "step", interrupted_step)
    assert runner.run_one("step 5") is Status.INTERRUPTED
    assert out.getvalue().endswith("interrupted\n")
    with Session.open(needle_recording) as fresh:
        fresh.goto("#150")
        expected = fresh.state_hash()
    assert context.session.position.events == 150
    assert context.session.state_hash() == expected
    assert prompt_text(engine.prompt_state()).startswith("[main ") and "#150]" in prompt_text(
        engine.prompt_state()
    )


def test_an_interrupt_after_a_branch_switch_returns_to_the_branch_it_started_on(
    context: CommandContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    def switch_then_interrupt(invocation: Invocation, context: CommandContext) -> CursorResult:
        context.switch_branch(BRANCH)
        raise KeyboardInterrupt

    engine = recording_engine(context)
    engine.execute(f"goto #{FORK_EVENTS - 10}")
    monkeypatch.setitem(language_run.HANDLERS, "step", switch_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        engine.execute("step")
    assert context.session.branch == "main"
    assert context.session.position.events == FORK_EVENTS - 10


def test_a_replay_mismatch_is_one_line_and_its_own_status(tmp_path: Path) -> None:
    """The module-level counter of NONDETERMINISTIC is set before recording, then reset before the
    seek, so the re-execution's timers differ from the recorded ones."""
    path = tmp_path / "nondeterministic.ttr"
    scenario_fixtures._CALLS[0] = 3
    record_run(NONDETERMINISTIC, NONDETERMINISTIC.resolve_config({"ticks": 300}), 1, path)
    scenario_fixtures._CALLS[0] = 0
    err = io.StringIO()
    with open_context(path, scenario=NONDETERMINISTIC) as context:
        runner = CommandRunner(recording_engine(context), Console(file=io.StringIO()), Console(file=err))
        assert runner.run_one("goto #600") is Status.MISMATCH
    lines = err.getvalue().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("mismatch: replay differs at event #")
    assert lines[0].endswith("[cause: determinism_bug]")
