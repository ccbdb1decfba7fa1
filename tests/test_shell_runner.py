"""Batch input and the runner: splitting scripts, one-line errors, stop-on-error, exit codes, JSON."""

from __future__ import annotations

import io
import json

import pytest
from rich.console import Console
from shell_fakes import FakeEngine

from timetravel.shell.runner import EXIT_COMMAND_FAILED, EXIT_OK, CommandRunner, Status, one_line
from timetravel.shell.script import SCRIPT_COMMANDS_MAX, ScriptError, split_commands


def make_runner(json_output: bool = False) -> tuple[CommandRunner, FakeEngine, io.StringIO, io.StringIO]:
    engine = FakeEngine()
    out, err = io.StringIO(), io.StringIO()
    runner = CommandRunner(
        engine,
        Console(file=out, width=100, color_system=None),
        Console(file=err, width=100, color_system=None),
        json_output=json_output,
    )
    return runner, engine, out, err


def test_a_c_string_splits_at_semicolons_outside_quotes() -> None:
    commands = split_commands("goto 950; branch --branch-seed 1; compare main b1")
    assert [(command.text, command.where) for command in commands] == [
        ("goto 950", "-c:1"),
        ("branch --branch-seed 1", "-c:1"),
        ("compare main b1", "-c:1"),
    ]
    assert [command.text for command in split_commands("find-first 'a; b'; step")] == [
        "find-first 'a; b'",
        "step",
    ]


def test_a_script_skips_comments_and_blank_lines_and_keeps_line_numbers() -> None:
    script = "# rewind and branch\n\ngoto 950\n   # indented comment\nbranch --branch-seed 1; goto #4096\n"
    commands = split_commands(script, "repro.tt")
    assert [(command.text, command.where) for command in commands] == [
        ("goto 950", "repro.tt:3"),
        ("branch --branch-seed 1", "repro.tt:5"),
        ("goto #4096", "repro.tt:5"),
    ]


def test_a_script_with_an_open_quote_or_too_many_commands_is_refused() -> None:
    with pytest.raises(ScriptError, match=r"s\.tt:2: unclosed quote"):
        split_commands("goto 1\nprint 'nodes", "s.tt")
    with pytest.raises(ScriptError, match="more than"):
        split_commands("step;" * (SCRIPT_COMMANDS_MAX + 1))


def test_one_line_keeps_the_first_line_and_bounds_its_length() -> None:
    assert one_line("\n  first\nsecond") == "first"
    assert len(one_line("x" * 10_000)) == 500


def test_every_command_runs_in_order_and_the_exit_code_is_zero() -> None:
    runner, engine, out, err = make_runner()
    assert runner.run_script("goto 950; goto 1000", "-c") == EXIT_OK
    assert engine.ran == ["goto 950", "goto 1000"]
    assert out.getvalue().splitlines() == [
        "[main 0ms #0]> goto 950",
        "at 950",
        "[main 950ms #950]> goto 1000",
        "at 1000",
    ]
    assert err.getvalue() == ""


def test_the_first_failing_command_stops_the_script_with_exit_code_2() -> None:
    runner, engine, _out, err = make_runner()
    assert runner.run_script("goto 950\nfail\ngoto 1000\n", "s.tt") == EXIT_COMMAND_FAILED
    assert engine.ran == ["goto 950", "fail"]
    assert err.getvalue() == "s.tt:2: error: goto: 'soon': not a time (examples: 950, 950ms)\n"


def test_an_internal_error_is_one_line_naming_type_and_place_never_a_traceback() -> None:
    runner, _engine, _out, err = make_runner()
    assert runner.run_script("boom", "-c") == EXIT_COMMAND_FAILED
    (line,) = err.getvalue().splitlines()
    assert line.startswith("-c:1: internal error: RuntimeError: the engine broke (at shell_fakes.py:")
    assert "Traceback" not in err.getvalue()


def test_quit_ends_a_script_successfully() -> None:
    runner, engine, _out, _err = make_runner()
    assert runner.run_script("goto 1; quit; goto 2", "-c") == EXIT_OK
    assert engine.ran == ["goto 1", "quit"]


def test_an_unsplittable_script_runs_nothing() -> None:
    runner, engine, _out, err = make_runner()
    assert runner.run_script("goto 1\ngoto '2", "-c") == EXIT_COMMAND_FAILED
    assert engine.ran == []
    assert err.getvalue() == "-c:2: error: unclosed quote or trailing backslash\n"

    assert runner.run_line("print 'nodes") is Status.USER_ERROR
    assert err.getvalue().endswith("\nerror: unclosed quote or trailing backslash\n")


def test_a_typed_line_reports_errors_without_a_location() -> None:
    runner, engine, _out, err = make_runner()
    assert runner.run_line("goto 5; fail; goto 6") is Status.USER_ERROR
    assert engine.ran == ["goto 5", "fail"]
    assert err.getvalue().startswith("error: goto: 'soon'")


def test_json_output_is_one_object_per_command(capsys: pytest.CaptureFixture[str]) -> None:
    runner, _engine, out, err = make_runner(json_output=True)
    assert runner.run_script("echo a b; fail", "-c") == EXIT_COMMAND_FAILED
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert lines == [
        {"command": "echo a b", "result": {"words": ["a", "b"]}},
        {"command": "fail", "error": "error: goto: 'soon': not a time (examples: 950, 950ms)"},
    ]
    assert err.getvalue().startswith("-c:1: error:")


def test_a_result_without_a_renderer_shows_its_data() -> None:
    runner, _engine, out, _err = make_runner()
    assert runner.run_line("echo x") is Status.OK
    assert out.getvalue() == "EchoResult\n{'words': ['x']}\n"
