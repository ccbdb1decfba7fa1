"""The REPL driven through prompt_toolkit's pipe input, with DummyOutput for the screen."""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path

import pytest
from prompt_toolkit.input import PipeInput, create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console
from shell_fakes import VOCABULARY, FakeEngine

from timetravel.shell import BoundedFileHistory, CommandRunner, PromptState, Repl, prompt_text
from timetravel.shell.prompt import prompt_fragments
from timetravel.shell.repl import toolbar_text

ENTER = "\r"
CTRL_C = "\x03"
CTRL_D = "\x04"


@pytest.fixture
def pipe() -> Iterator[PipeInput]:
    with create_pipe_input() as created:
        yield created


def run_repl(
    pipe: PipeInput, keys: str, history: BoundedFileHistory | None = None
) -> tuple[int, FakeEngine, str]:
    engine = FakeEngine()
    out = io.StringIO()
    repl = Repl(
        CommandRunner(engine, Console(file=out, width=100, color_system=None)), history, pipe, DummyOutput()
    )
    pipe.send_text(keys)
    return repl.run(), engine, out.getvalue()


def test_typed_lines_run_in_order_and_ctrl_d_leaves_with_exit_code_0(pipe: PipeInput) -> None:
    code, engine, out = run_repl(pipe, f"goto 950{ENTER}echo a b{ENTER}{CTRL_D}")
    assert code == 0
    assert engine.ran == ["goto 950", "echo a b"]
    assert out == "at 950\nEchoResult\n{'words': ['a', 'b']}\n"


def test_an_error_is_one_line_and_the_loop_carries_on(pipe: PipeInput) -> None:
    code, engine, out = run_repl(pipe, f"fail{ENTER}boom{ENTER}goto 1{ENTER}{CTRL_D}")
    assert code == 0
    assert engine.ran == ["fail", "boom", "goto 1"]
    lines = out.splitlines()
    assert lines[0] == "error: goto: 'soon': not a time (examples: 950, 950ms)"
    assert lines[1].startswith("internal error: RuntimeError: the engine broke (at shell_fakes.py:")
    assert lines[2:] == ["at 1"]


def test_several_commands_on_one_line_stop_at_the_first_failure(pipe: PipeInput) -> None:
    _code, engine, _out = run_repl(pipe, f"goto 1; fail; goto 2{ENTER}{CTRL_D}")
    assert engine.ran == ["goto 1", "fail"]


def test_quit_leaves_and_blank_lines_and_ctrl_c_run_nothing(pipe: PipeInput) -> None:
    code, engine, _out = run_repl(pipe, f"{ENTER}   {ENTER}goto 3{CTRL_C}quit{ENTER}goto 4{ENTER}")
    assert code == 0
    assert engine.ran == ["quit"]


def test_the_history_persists_typed_lines_to_the_next_session(pipe: PipeInput, tmp_path: Path) -> None:
    path = tmp_path / "shell_history"
    run_repl(pipe, f"goto 950{ENTER}echo x{ENTER}{CTRL_D}", BoundedFileHistory(path))
    assert list(BoundedFileHistory(path).load_history_strings()) == ["echo x", "goto 950"]


def test_up_arrow_recalls_the_previous_session_line(tmp_path: Path) -> None:
    path = tmp_path / "shell_history"
    BoundedFileHistory(path).append_string("goto 950")
    with create_pipe_input() as pipe:
        _code, engine, _out = run_repl(pipe, f"\x1b[A{ENTER}{CTRL_D}", BoundedFileHistory(path))
    assert engine.ran == ["goto 950"]


def test_the_prompt_shows_branch_time_event_and_failure() -> None:
    assert prompt_text(PromptState("main", 950_000_000, 4096)) == "[main 950ms #4096]> "
    assert prompt_text(PromptState("b1", 1_000_500_000, 5000, failed=True)) == "[b1 1000.5ms #5000 FAIL]> "
    assert prompt_text(PromptState("main", 1_500, 3, unit="us")) == "[main 1.5us #3]> "
    styles = dict((text, style) for style, text, *_ in prompt_fragments(PromptState("b1", 0, 0, failed=True)))
    assert styles["b1"] == "class:prompt.branch" and styles["FAIL"] == "class:prompt.failed"


def test_the_prompt_follows_the_cursor(pipe: PipeInput) -> None:
    engine = FakeEngine()
    repl = Repl(CommandRunner(engine, Console(file=io.StringIO())), None, pipe, DummyOutput())
    pipe.send_text(f"goto 1000{ENTER}{CTRL_D}")
    repl.run()
    assert "".join(fragment[1] for fragment in repl._message()) == "[main 1000ms #1000 FAIL]> "


def test_the_toolbar_shows_the_usage_and_what_the_slot_expects() -> None:
    goto = "goto TIME [--branch BRANCH]"
    assert toolbar_text("", VOCABULARY).startswith("Tab completes")
    assert toolbar_text("goto", VOCABULARY).startswith(f"{goto}  —  move the cursor to the state after")
    compare = "compare A B [--reference FILE] [--rtol WORD] [--reference-metric WORD] [--reference-node NODE]"
    assert toolbar_text("compare main ", VOCABULARY) == f"{compare}  —  B: the second branch"
    assert (
        toolbar_text("goto 950 --branch ", VOCABULARY)
        == f"{goto}  —  --branch: switch the cursor to this branch first"
    )
    assert toolbar_text("goto 950 ", VOCABULARY) == goto
    assert toolbar_text("plot main ", VOCABULARY).startswith("plot [BRANCHES...] [--metric WORD]")
    assert toolbar_text("gto", VOCABULARY).startswith("Tab completes")
    assert toolbar_text("gto x", VOCABULARY) == "unknown command 'gto' (help lists the commands)"
