"""FlightRecorder: at a hang, each rank's last collectives and whom it waits on.

Question it answers: *who is stuck, in what, and because of whom?* One row a rank, as NCCL's
flight recorder would tell it: its status, the last collective it entered (group#seq, op and
tensors: ``0#9 all_reduce(sum) float32[]``) and the last it completed, and what it waits on — the
ranks that never entered its collective. A rank the others wait for is marked ``◀ r0,r2 wait for
it``: on ``ddp_mlp.py`` with r1's contribution dropped, that is r1.

The pane shows only while the world at the cursor holds a hang's flight recorder (the cursor at or
after the hang); ``rows`` empty hides it. Attributes down (``rows``, ``title``, ``unit``); it posts
nothing.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from timetravel.tui.css import css_beside
from timetravel.tui.model import FlightRow
from timetravel.tui.timefmt import exact_time


class FlightRecorder(Widget):
    """A hang's flight recorder, a row a rank. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)
    COMPONENT_CLASSES: ClassVar[set[str]] = {
        "flight-recorder--header",
        "flight-recorder--waiting",
        "flight-recorder--culprit",
    }

    rows: reactive[tuple[FlightRow, ...]] = reactive((), layout=True)
    unit: reactive[str] = reactive("ms")

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.border_title = "flight recorder"
        self.display = False

    def watch_rows(self, rows: tuple[FlightRow, ...]) -> None:
        self.display = bool(rows)

    def set_title(self, title: str) -> None:
        self.border_title = title or "flight recorder"

    def row_text(self, row: FlightRow) -> str:
        """``r0  waiting  entered 0#9 all_reduce(sum) float32[] @1.0545ms  done 0#8  waits on r1``."""
        entered = row.last_entered or "-"
        if row.what:
            entered += f" {row.what}"
        if row.t_enter_ns is not None:
            entered += f" @{exact_time(row.t_enter_ns, self.unit)}"
        words = [
            f"{row.rank:<4}",
            f"{row.status:<8}",
            f"entered {entered}",
            f"done {row.last_completed or '-'}",
        ]
        if row.waits_on:
            words.append(f"waits on {','.join(row.waits_on)}")
        if row.waited_by:
            words.append(f"◀ {','.join(row.waited_by)} wait for it")
        return "  ".join(words)

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        for index, row in enumerate(self.rows):
            if index:
                text.append("\n")
            style = "flight-recorder--culprit" if row.waited_by else "flight-recorder--waiting"
            text.append(self.row_text(row), self.get_component_rich_style(style, partial=True))
        return text
