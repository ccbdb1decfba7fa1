"""ExplainPane: why the run failed — the causal chain of ``explain``, one entry per link.

The detector that fired is on top, its causes below it, the fault record (or choice) with no cause
inside the simulation at the bottom. Each entry shows the link's event number, time, node and kind,
what happened there and the state it changed. Enter (or a click) on a link posts
:class:`ExplainPane.LinkChosen`; the App answers it with ``goto #N --branch B`` (or ``goto T`` for a
record without an event), so the cursor, the timeline, the event log and the state inspector all
move to that link.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual import on
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from timetravel.tui.css import css_beside
from timetravel.tui.safe_lines import TerminalSafeLines

ROLE_STYLES = {
    "detector": "bold red",
    "message": "cyan",
    "write": "yellow",
    "fault": "bold magenta",
    "root": "bold magenta",
}


@dataclass(frozen=True)
class ExplainRow:
    """One link of the chain as the pane shows it (built by ``timetravel.tui.adapt.explain_rows``)."""

    role: str
    event: int | None
    t_ns: int | None
    head: str
    """``#60739 982.998553ms r3 gpu.done``"""
    what: str
    changes: tuple[str, ...] = ()
    because: str = ""


class ExplainPane(TerminalSafeLines, OptionList):
    """The causal chain of a failure. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)

    rows: reactive[tuple[ExplainRow, ...]] = reactive((), always_update=True)
    branch: reactive[str] = reactive("main")
    headline: reactive[str] = reactive("")

    class LinkChosen(Message):
        """Move the cursor to this link: after its event, or to its time when it has none."""

        def __init__(self, branch: str, event: int | None, t_ns: int | None) -> None:
            super().__init__()
            self.branch = branch
            self.event = event
            self.t_ns = t_ns

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.border_title = "why · explain"

    def watch_rows(self, rows: Sequence[ExplainRow]) -> None:
        self.clear_options()
        self.add_options([Option(self._prompt(index, row), id=str(index)) for index, row in enumerate(rows)])
        if rows:
            self.highlighted = 0

    def watch_headline(self, headline: str) -> None:
        self.border_subtitle = headline

    def _prompt(self, index: int, row: ExplainRow) -> Text:
        text = Text(no_wrap=False)
        text.append("   " if index == 0 else "<- ", style="dim")
        text.append(row.head, style=ROLE_STYLES.get(row.role, ""))
        text.append(f": {row.what}")
        for change in row.changes:
            text.append(f"\n     {change}", style="yellow")
        if row.because:
            text.append(f"\n     because it {row.because}", style="dim")
        return text

    @on(OptionList.OptionSelected)
    def _chosen(self, message: OptionList.OptionSelected) -> None:
        message.stop()
        index = message.option_index
        if 0 <= index < len(self.rows):
            row = self.rows[index]
            if row.event is not None or row.t_ns is not None:
                self.post_message(self.LinkChosen(self.branch, row.event, row.t_ns))
