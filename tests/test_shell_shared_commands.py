"""The TUI's command line and the shell run the same command objects: one line typed into each
reaches the same handler of the command language with the same parsed invocation.

The TUI's part is its ``CommandLine`` widget as it is on main: typing a line and pressing Enter
posts ``CommandSubmitted``, and running that text is its owner's job "through the explore
engine's command language" — ``run_line`` with the owner's ``CommandContext``, the one function
the shell's engine calls too. A spy wraps the language's own ``print`` handler, so the test sees
what each front end handed to the engine and what came back.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import pytest
from prompt_toolkit.completion import CompleteEvent
from prompt_toolkit.document import Document
from prompt_toolkit.input import create_pipe_input
from prompt_toolkit.output import DummyOutput
from rich.console import Console

from tests.tui.harness import Harness, drive
from timetravel.explore.commands import (
    COMMANDS,
    CommandContext,
    Invocation,
    RecordingValues,
    open_context,
    run_line,
)
from timetravel.explore.commands import run as language_run
from timetravel.shell import CommandRunner, Repl
from timetravel.shell.completer import ShellCompleter
from timetravel.shell.language import recording_engine
from timetravel.sim.timefmt import format_time
from timetravel.tui.values import completion_lines
from timetravel.tui.widgets.command_line import CommandLine

LINE = "print nodes/w3 --depth 1"
KEY_NAMES = {" ": "space", "/": "slash", "-": "minus"}


@pytest.fixture
def handled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Invocation, CommandContext, Any]]:
    """Every call of the language's ``print`` handler: (invocation, context, result)."""
    calls: list[tuple[Invocation, CommandContext, Any]] = []
    original = language_run.HANDLERS["print"]

    def spy(invocation: Invocation, context: CommandContext) -> Any:
        result = original(invocation, context)
        calls.append((invocation, context, result))
        return result

    monkeypatch.setitem(language_run.HANDLERS, "print", spy)
    return calls


def type_into_the_tui(context: CommandContext, line: str) -> Any:
    """Type ``line`` into the TUI's command line, press Enter, run what it submits as its owner does."""
    widget = CommandLine(RecordingValues(context))
    app = Harness(widget)

    async def scenario(pilot: Any) -> None:
        widget.focus()
        await pilot.pause()
        await pilot.press(*(KEY_NAMES.get(character, character) for character in line), "enter")
        await pilot.pause()

    drive(app, scenario, (100, 6))
    [submitted] = app.posted(CommandLine.CommandSubmitted)
    assert submitted.text == line
    return run_line(submitted.text, context)


def type_into_the_shell(context: CommandContext, line: str) -> str:
    out = io.StringIO()
    runner = CommandRunner(recording_engine(context), Console(file=out, width=100, color_system=None))
    with create_pipe_input() as pipe:
        pipe.send_text(f"{line}\r\x04")
        assert Repl(runner, None, pipe, DummyOutput()).run() == 0
    return out.getvalue()


def test_one_line_reaches_the_same_handler_with_the_same_invocation_from_both(
    needle_recording: Path, handled: list[tuple[Invocation, CommandContext, Any]]
) -> None:
    with open_context(needle_recording) as tui_context:
        tui_result = type_into_the_tui(tui_context, LINE)
    with open_context(needle_recording) as shell_context:
        shown = type_into_the_shell(shell_context, LINE)
        unit = shell_context.display_unit

    assert len(handled) == 2
    (tui_invocation, tui_seen_context, tui_handled), (shell_invocation, shell_seen_context, shell_handled) = (
        handled
    )
    assert tui_seen_context is tui_context and shell_seen_context is shell_context
    assert tui_invocation.spec is shell_invocation.spec is COMMANDS["print"]
    assert tui_invocation == shell_invocation
    assert tui_invocation.value("path") == "nodes/w3" and tui_invocation.value("depth") == 1
    assert tui_handled == shell_handled == tui_result
    assert shown.splitlines()[0] == f"nodes/w3  on main at {format_time(tui_result.t_ns, unit)}"


def test_both_complete_from_the_same_specs_and_the_same_recording_values(needle_recording: Path) -> None:
    with open_context(needle_recording) as context:
        values = RecordingValues(context)
        engine = recording_engine(context)
        completer = ShellCompleter(engine.vocabulary, engine.completion_source)
        for spec in COMMANDS.values():
            assert engine.vocabulary.commands[spec.name] is spec
        for text, expected in (("print nodes/w3/tot", "nodes/w3/total"), ("events --node lea", "leader")):
            shell = [item.text for item in completer.get_completions(Document(text), CompleteEvent())]
            tui = completion_lines(text, values)
            assert shell[0] == expected
            assert tui[0].split()[-1] == expected
