"""CommandLine: completion by argument kind, tab cycling, history, submit; the palette lists the same."""

from __future__ import annotations

from typing import ClassVar

from textual.command import CommandPalette

from tests.tui.harness import Harness, drive
from timetravel.tui.completion import complete
from timetravel.tui.model import CommandSpec, CompletionContext
from timetravel.tui.palette import CommandsProvider
from timetravel.tui.widgets.command_line import CommandLine

SPECS = (
    CommandSpec("goto", "goto TIME", "seek to a time", ("time",)),
    CommandSpec("back", "back N", "go back N events", ("text",)),
    CommandSpec(
        "branch",
        "branch [--drop-fault ID]",
        "branch a new future",
        (),
        {"--drop-fault": "fault", "--name": "text"},
    ),
    CommandSpec("branches", "branches", "list the branches"),
    CommandSpec("diff", "diff A B [--path P]", "diff two runs", ("branch", "branch"), {"--path": "path"}),
    CommandSpec("print", "print PATH", "print a value", ("path",)),
)
CONTEXT = CompletionContext(
    nodes=("rank0", "rank1"),
    branches=("main", "b1", "b2"),
    faults=("f1", "f3"),
    paths=("nodes/rank0/weights", "nodes/rank0/step", "nodes/rank1/weights", "faults"),
)


def test_completion_offers_commands_then_each_argument_by_its_kind() -> None:
    assert complete("b", SPECS, CONTEXT) == ["back ", "branch ", "branches "]
    assert complete("branch --", SPECS, CONTEXT) == ["branch --drop-fault ", "branch --name "]
    assert complete("branch --drop-fault ", SPECS, CONTEXT) == [
        "branch --drop-fault f1 ",
        "branch --drop-fault f3 ",
    ]
    assert complete("diff main b", SPECS, CONTEXT) == ["diff main b1 ", "diff main b2 "]
    assert complete("diff main b1 --path nodes/rank1", SPECS, CONTEXT) == ["diff main b1 --path nodes/rank1/"]
    assert complete("print nodes/", SPECS, CONTEXT) == ["print nodes/rank0/", "print nodes/rank1/"]
    assert complete("print nodes/rank0/", SPECS, CONTEXT) == [
        "print nodes/rank0/weights",
        "print nodes/rank0/step",
    ]
    assert complete("nosuch x", SPECS, CONTEXT) == []
    assert complete("branches x", SPECS, CONTEXT) == []


def run(scenario) -> None:
    line = CommandLine(SPECS, context=CONTEXT)
    app = Harness(line)

    async def wrapped(pilot) -> None:
        line.focus()
        await pilot.pause()
        await scenario(pilot, app, line)

    drive(app, wrapped, (80, 6))


def test_tab_cycles_through_completions_and_typing_starts_over() -> None:
    async def scenario(pilot, app, line: CommandLine) -> None:
        await pilot.press("b")
        await pilot.press("tab")
        assert line.value == "back "
        await pilot.press("tab")
        assert line.value == "branch "
        await pilot.press("tab", "tab")
        assert line.value == "back "
        await pilot.press("backspace", "backspace", "backspace", "backspace", "backspace", "d", "tab")
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
        self.command_specs = SPECS
        self.prefilled: list[str] = []
        self.submitted: list[str] = []

    def prefill_command(self, text: str) -> None:
        self.prefilled.append(text)

    def submit_command(self, text: str) -> None:
        self.submitted.append(text)


def test_the_palette_lists_the_command_language_and_prefills_or_runs() -> None:
    app = PaletteHost()

    async def scenario(pilot) -> None:
        app.action_command_palette()
        await pilot.pause()
        assert isinstance(app.screen, CommandPalette)
        for key in "goto":
            await pilot.press(key)
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause()
        assert app.prefilled == ["goto "]
        app.action_command_palette()
        await pilot.pause()
        for key in "branches":
            await pilot.press(key)
        await pilot.pause(0.3)
        await pilot.press("enter")
        await pilot.pause()
        assert app.submitted == ["branches"]

    drive(app, scenario)
