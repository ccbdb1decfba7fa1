"""CommandLine: the ``:`` prompt that speaks the shared command language.

It only edits text: it completes with the command language's own completion (ghost text for the
first candidate; tab cycles through all of them), from a ``ValueSource`` the owner sets
(:class:`timetravel.tui.values.ViewValues` over what is on screen, or the Session), keeps a
bounded history (up/down), and posts
:class:`CommandLine.CommandSubmitted` with the line. Running the command is the owner's job, through
the explore engine's command language — the TUI has no command of its own. Escape posts
:class:`CommandLine.Dismissed` (the owner hands focus back).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from textual.binding import Binding, BindingType
from textual.message import Message
from textual.suggester import Suggester
from textual.widgets import Input

from timetravel.explore.commands.complete import ValueSource
from timetravel.tui.css import css_beside
from timetravel.tui.safe_lines import TerminalSafeLines
from timetravel.tui.values import completion_lines

HISTORY_MAX = 500
PROMPT = ":"


class CommandSuggester(Suggester):
    """Ghost text: the first whole-line completion of what is typed."""

    def __init__(self, completions: Callable[[str], list[str]]) -> None:
        super().__init__(use_cache=False, case_sensitive=True)
        self._completions = completions

    async def get_suggestion(self, value: str) -> str | None:
        candidates = self._completions(value)
        return candidates[0] if candidates else None


class CommandLine(TerminalSafeLines, Input):
    """The command prompt. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "tab", "complete", "complete", show=False, tooltip="complete; press again for the next completion"
        ),
        Binding("up", "history(-1)", "previous", show=False, tooltip="previous command"),
        Binding("down", "history(1)", "next", show=False, tooltip="next command"),
        Binding("escape", "dismiss", "close", show=False, tooltip="leave the command line"),
    ]

    class CommandSubmitted(Message):
        """The user entered ``text`` (stripped, never empty)."""

        def __init__(self, line: CommandLine, text: str) -> None:
            super().__init__()
            self.line = line
            self.text = text

        @property
        def control(self) -> CommandLine:
            return self.line

    class Dismissed(Message):
        """The user left the command line without running anything."""

    def __init__(
        self,
        source: ValueSource | None = None,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        self.source = source
        self.history: list[str] = []
        self._history_index = 0
        self._cycle: list[str] = []
        self._cycle_index = 0
        super().__init__(
            placeholder=": command (tab completes, ? keys)",
            suggester=CommandSuggester(self.completions),
            name=name,
            id=id,
            classes=classes,
        )

    def completions(self, text: str) -> list[str]:
        """Whole-line completions of ``text`` (the command language's, with the current values)."""
        return completion_lines(text.removeprefix(PROMPT), self.source)

    # -- actions --------------------------------------------------------------------------------

    def action_complete(self) -> None:
        if not self._cycle:
            self._cycle = self.completions(self.value)
            self._cycle_index = 0
            if not self._cycle:
                self.app.bell()
                return
        else:
            self._cycle_index = (self._cycle_index + 1) % len(self._cycle)
        cycle = self._cycle
        self.value = cycle[self._cycle_index]
        self.cursor_position = len(self.value)
        self._cycle = cycle

    def on_input_changed(self, event: Input.Changed) -> None:
        if self._cycle and event.value != self._cycle[self._cycle_index]:
            self._cycle = []

    def action_history(self, direction: int) -> None:
        if not self.history:
            return
        self._history_index = max(0, min(len(self.history), self._history_index + direction))
        self.value = self.history[self._history_index] if self._history_index < len(self.history) else ""
        self.cursor_position = len(self.value)

    def action_dismiss(self) -> None:
        self.value = ""
        self.post_message(self.Dismissed())

    async def action_submit(self) -> None:
        text = self.value.strip().removeprefix(PROMPT).strip()
        if not text:
            self.post_message(self.Dismissed())
            return
        if not self.history or self.history[-1] != text:
            self.history.append(text)
            del self.history[:-HISTORY_MAX]
        self._history_index = len(self.history)
        self.value = ""
        self.post_message(self.CommandSubmitted(self, text))
