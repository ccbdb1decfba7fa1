"""The shell over the real command language: its handlers, help with the shell's commands, plot, quit."""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from typing import Any, ClassVar, TypeVar

import pytest
from rich.console import Console

from timetravel.explore.commands import COMMANDS, CommandContext, CommandError, Invocation, Moment
from timetravel.explore.commands import run as language_run
from timetravel.explore.results import CursorResult, HelpResult
from timetravel.shell import CommandRunner, ExitShell, LanguageEngine, prompt_text
from timetravel.shell.commands import metric_curve
from timetravel.shell.results import PlotResult

T = TypeVar("T")

MS = 1_000_000


class Metrics:
    """Two branches' loss rows ``[t_ns, node, value]``, two ranks each; b1's rank1 goes NaN at 2ms."""

    rows: ClassVar[dict[str, list[list[Any]]]] = {
        "main": [[0, "rank0", 2.0], [0, "rank1", 4.0], [MS, "rank0", 1.0], [MS, "rank1", 1.0]],
        "b1": [[0, "rank0", 2.0], [0, "rank1", 4.0], [2 * MS, "rank0", 1.0], [2 * MS, "rank1", math.nan]],
    }

    def branch_names(self) -> Sequence[str]:
        return list(self.rows)

    def metric_rows(self, branch: str, metric: str) -> Any:
        return self.rows[branch] if metric == "loss" else None


def engine_without_recording() -> LanguageEngine:
    return LanguageEngine(CommandContext(session=None))


class FakeSession:
    display_unit = "ms"

    def metric_names(self) -> list[str]:
        return ["loss"]

    def read_values(self, read: Callable[[], T]) -> T:
        return read()  # every value of this fake is plain data


@pytest.fixture
def cursor_handlers(monkeypatch: pytest.MonkeyPatch) -> list[Invocation]:
    """``goto`` and ``where`` handlers in the language's own table, recording what they were given."""
    calls: list[Invocation] = []
    state = {"t_ns": 0}

    def where(invocation: Invocation, context: CommandContext) -> CursorResult:
        calls.append(invocation)
        return CursorResult("main", state["t_ns"], state["t_ns"] // MS, 2000, 2000 * MS, None)

    def goto(invocation: Invocation, context: CommandContext) -> CursorResult:
        calls.append(invocation)
        state["t_ns"] = invocation.value("time").t_ns
        return CursorResult("main", state["t_ns"], state["t_ns"] // MS, 2000, 2000 * MS, None)

    monkeypatch.setitem(language_run.HANDLERS, "where", where)
    monkeypatch.setitem(language_run.HANDLERS, "goto", goto)
    return calls


def test_a_command_runs_the_language_handler_with_the_language_parse(
    cursor_handlers: list[Invocation],
) -> None:
    engine = LanguageEngine(CommandContext(session=FakeSession()))
    result = engine.execute("goto 950")
    goto_call = next(call for call in cursor_handlers if call.name == "goto")
    assert goto_call.spec is COMMANDS["goto"]
    assert goto_call.value("time") == Moment(t_ns=950 * MS)
    assert isinstance(result, CursorResult) and result.t_ns == 950 * MS
    assert prompt_text(engine.prompt_state()) == "[main 950ms #950]> "


def test_help_lists_the_language_and_the_shell_commands() -> None:
    result = engine_without_recording().execute("help")
    assert isinstance(result, HelpResult)
    names = [entry.name for entry in result.entries]
    assert names == [*COMMANDS, "plot", "quit"]


def test_help_details_a_shell_command_and_a_language_command() -> None:
    engine = engine_without_recording()
    plot_help = engine.execute("help plot")
    assert isinstance(plot_help, HelpResult)
    assert (
        plot_help.detail.splitlines()[0]
        == "plot [BRANCHES...] [--metric WORD] [--log] [--width COUNT] [--height COUNT]"
    )
    assert "examples:" in plot_help.detail and "  plot main b1" in plot_help.detail
    quit_help = engine.execute("? quit")
    assert isinstance(quit_help, HelpResult) and "aliases: exit" in quit_help.detail
    goto_help = engine.execute("help goto")
    assert isinstance(goto_help, HelpResult) and goto_help.detail.startswith("goto TIME [--branch BRANCH]")


def test_commands_over_a_recording_say_none_is_open() -> None:
    engine = engine_without_recording()
    with pytest.raises(CommandError, match=r"^goto: no recording is open$"):
        engine.execute("goto 950")
    with pytest.raises(CommandError, match=r"^plot: no recording is open$"):
        engine.execute("plot")
    assert prompt_text(engine.prompt_state()) == "[no recording]> "


def test_the_language_parser_names_bad_words_before_anything_runs() -> None:
    engine = engine_without_recording()
    with pytest.raises(CommandError, match="unknown command 'gto' \\(did you mean `goto`\\?\\)"):
        engine.execute("gto 950")
    with pytest.raises(CommandError, match="goto TIME: 'soon'"):
        engine.execute("goto soon")
    with pytest.raises(CommandError, match="plot: unknown option --colour"):
        engine.execute("plot --colour red")
    with pytest.raises(CommandError, match="plot --width: 'wide'"):
        engine.execute("plot --width wide")


def test_the_shells_own_commands_go_through_the_languages_one_parser() -> None:
    engine = engine_without_recording()
    with pytest.raises(CommandError, match=r"plot: unknown option --metrc \(did you mean --metric\?\)"):
        engine.execute("plot --metrc loss")
    with pytest.raises(CommandError, match=r"plot: unknown option --hei \(did you mean --height\?\)"):
        engine.execute("plot --hei 3")


def test_quit_and_exit_leave_and_take_no_arguments() -> None:
    engine = engine_without_recording()
    with pytest.raises(ExitShell):
        engine.execute("quit")
    with pytest.raises(ExitShell):
        engine.execute("exit")
    with pytest.raises(CommandError, match="quit: unexpected 'now'"):
        engine.execute("quit now")


def test_plot_reads_each_branch_and_keeps_a_nan_visible() -> None:
    engine = LanguageEngine(CommandContext(session=FakeSession()), metrics=Metrics())
    result = engine.execute("plot --log b1 main --width 30")
    assert isinstance(result, PlotResult)
    assert (result.metric, result.log_y, result.width, result.height) == ("loss", True, 30, 12)
    assert [series.label for series in result.series] == ["b1", "main"]
    assert list(result.series[1].points) == [(0, 3.0), (MS, 1.0)]
    assert result.series[0].points[0] == (0, 3.0) and math.isnan(result.series[0].points[1][1])


def test_plot_errors_name_the_branch_or_metric() -> None:
    engine = LanguageEngine(CommandContext(session=FakeSession()), metrics=Metrics())
    with pytest.raises(CommandError, match=r"plot: no branch 'b9' \(branches: main, b1\)"):
        engine.execute("plot main b9")
    with pytest.raises(
        CommandError,
        match=r"plot: branch main has no metric 'accuracy' \(metrics: loss; choose one with --metric\)",
    ):
        engine.execute("plot --metric accuracy")
    with pytest.raises(CommandError, match="out of range"):
        engine.execute("plot --height 0")
    with pytest.raises(CommandError, match="at most 8 branches"):
        engine.execute("plot " + " ".join(["main"] * 9))


def test_metric_curve_averages_nodes_per_time_and_never_averages_a_nan_away() -> None:
    assert metric_curve([]) == []
    assert metric_curve([[0, "a", 1.0], [0, "b", 2.0], [5, "a", 4.0]]) == [(0, 1.5), (5, 4.0)]
    (point,) = metric_curve([[0, "a", 1.0], [0, "b", math.inf], [0, "c", math.nan]])
    assert point == (0, math.inf)


def test_a_batch_through_the_language_stops_at_the_first_error(cursor_handlers: list[Invocation]) -> None:
    engine = LanguageEngine(CommandContext(session=FakeSession()))
    out, err = io.StringIO(), io.StringIO()
    runner = CommandRunner(
        engine,
        Console(file=out, width=100, color_system=None),
        Console(file=err, width=100, color_system=None),
    )
    code = runner.run_script("goto 950; goto soon; goto 990", "-c")
    assert code == 2
    assert [call.name for call in cursor_handlers if call.name == "goto"] == ["goto"]
    assert out.getvalue().splitlines()[0] == "[main 0ms #0]> goto 950"
    assert "[main 950ms #950]> goto soon" in out.getvalue()
    assert err.getvalue().startswith("-c:1: error: goto TIME: 'soon': not a time")
    assert len(err.getvalue().splitlines()) == 1


def test_off_a_terminal_tables_carry_no_padding_at_the_ends_of_lines() -> None:
    out = io.StringIO()
    runner = CommandRunner(engine_without_recording(), Console(file=out, width=100, color_system=None))
    runner.run_one("help")
    lines = out.getvalue().splitlines()
    assert len(lines) > len(COMMANDS)
    assert [line for line in lines if line != line.rstrip()] == []
    assert any(line.startswith("goto ") for line in lines)
