"""CommandLine: the command language's completion with the screen's values, tab cycling, history,
submit; the palette lists the command language's commands and prefills or runs them."""

from __future__ import annotations

from typing import ClassVar

from textual.command import CommandPalette

from tests.tui import sample
from tests.tui.harness import Harness, drive
from timetravel.tui.palette import CommandsProvider
from timetravel.tui.values import ViewValues, completion_lines
from timetravel.tui.widgets.command_line import CommandLine

VALUES = ViewValues(sample.cursor_view())


def test_completion_offers_commands_then_each_argument_by_its_kind() -> None:
    assert completion_lines("bra", VALUES) == ["branch ", "branches "]
    assert completion_lines("branch --drop-fault ", VALUES) == ["branch --drop-fault f3 "]
    assert completion_lines("diff main b", VALUES) == ["diff main b1 ", "diff main b2 ", "diff main b3 "]
    assert completion_lines("print nodes/rank1", VALUES)[:2] == ["print nodes/rank1/", "print nodes/rank10/"]
    assert completion_lines("print nodes/rank5/w", VALUES) == ["print nodes/rank5/weights "]
    assert completion_lines("goto 9", VALUES) == [
        "goto 900ms ",
        "goto 950ms ",
        "goto 972ms ",
    ]  # a snapshot, the fork, the fault
    assert completion_lines("find-first nonf", VALUES) == ["find-first nonfinite("]
    assert completion_lines("nosuch x", VALUES) == []


def run(scenario) -> None:
    line = CommandLine(VALUES)
    app = Harness(line)

    async def wrapped(pilot) -> None:
        line.focus()
        await pilot.pause()
        await scenario(pilot, app, line)

    drive(app, wrapped, (80, 6))


def test_tab_cycles_through_completions_and_typing_starts_over() -> None:
    async def scenario(pilot, app, line: CommandLine) -> None:
        await pilot.press("b", "r")
        await pilot.press("tab")
        assert line.value == "branch "
        await pilot.press("tab")
        assert line.value == "branches "
        await pilot.press("tab")
        assert line.value == "branch "
        for _ in range(7):
            await pilot.press("backspace")
        await pilot.press("d", "i", "f", "tab")
        assert line.value == "diff "
        await pilot.press("m", "tab")
        assert line.value == "diff main "

    run(scenario)


def test_enter_posts_the_command_and_history_brings_it_back() -> None:
    async def scenario(pilot, app, line: CommandLine) -> None:
        for key in ":goto 950":
            await pilot.press(key if key not in " :" else {" ": "space", ":": "colon"}[key])
        await pilot.press("enter")
        assert [message.text for message in app.posted(CommandLine.CommandSubmitted)] == ["goto 950"]
        assert line.value == ""
        await pilot.press("up")
        assert line.value == "goto 950"
        await pilot.press("escape")
        assert line.value == "" and app.posted(CommandLine.Dismissed)

    run(scenario)


class PaletteHost(Harness):
    COMMANDS: ClassVar = {CommandsProvider}

    def __init__(self) -> None:
        super().__init__()
        self.prefilled: list[str] = []
        self.submitted: list[str] = []

    def prefill_command(self, text: str) -> None:
        self.prefilled.append(text)

    def submit_command(self, text: str) -> None:
        self.submitted.append(text)


def test_the_palette_lists_the_command_language_and_prefills_or_runs() -> None:
    app = PaletteHost()

    async def choose(pilot, query: str) -> None:
        app.action_command_palette()
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        for key in query:
            await pilot.press(key if key != "-" else "minus")
        await pilot.pause(0.2)
        await pilot.press("enter")
        await pilot.pause()

    async def scenario(pilot) -> None:
        await choose(pilot, "goto")  # needs a time: prefilled
        await choose(pilot, "branches")  # needs nothing: run
        await choose(pilot, "where")
        assert app.prefilled == ["goto "]
        assert app.submitted == ["branches", "where"]

    drive(app, scenario)
