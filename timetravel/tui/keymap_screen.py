"""The ``?`` screen: the key map, grouped by where the keys work. Escape, ``?`` or ``q`` closes it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import ModalScreen
from textual.widgets import DataTable

from timetravel.tui.css import css_beside


class KeyMapScreen(ModalScreen[None]):
    """A table of (where, keys, what)."""

    DEFAULT_CSS = css_beside(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("escape,question_mark,q", "dismiss", "close"),
    ]

    def __init__(self, rows: Sequence[tuple[str, str, str]]) -> None:
        super().__init__()
        self.rows = list(rows)

    def compose(self) -> ComposeResult:
        table: DataTable[str] = DataTable(id="keymap-box", cursor_type="row", zebra_stripes=True)
        table.border_title = "keys · esc closes"
        yield table

    def on_mount(self) -> None:
        table = self.query_one(DataTable)
        table.add_columns("where", "keys", "what")
        for row in self.rows:
            table.add_row(*row)
        table.focus()
