"""FlightRecorder: at a hang, each rank's last collectives and whom it waits on.

Question it answers: *who is stuck, in what, and because of whom?* One row a rank, as NCCL's
flight recorder would tell it: its status, the last collective it entered (group#seq, op and
tensors: ``in 0#9 all_reduce(sum) float32[]``) and the last it completed, and what it waits on —
the ranks that never entered its collective; the subtitle says since when the ranks wait. A rank the others wait for is marked ``◀ r0,r2 wait for
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

from timetravel.tui.css import component_classes, css_beside
from timetravel.tui.model import FlightRow
from timetravel.tui.safe_lines import TerminalSafeLines
from timetravel.tui.timefmt import exact_time


class FlightRecorder(TerminalSafeLines, Widget):
    """A hang's flight recorder, a row a rank. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)
    COMPONENT_CLASSES: ClassVar[set[str]] = component_classes(
        "flight-recorder", "header", "waiting", "culprit"
    )

    rows: reactive[tuple[FlightRow, ...]] = reactive((), layout=True)
    unit: reactive[str] = reactive("ms")

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.border_title = "flight recorder"
        self.display = False

    def watch_rows(self, rows: tuple[FlightRow, ...]) -> None:
        self.display = bool(rows)
        self.border_subtitle = self.since_text

    def set_title(self, title: str) -> None:
        self.border_title = title or "flight recorder"

    def row_text(self, row: FlightRow) -> str:
        """``r0  waiting  in 0#9 all_reduce(sum) float32[]  done 0#8  waits on r1``; a rank in no
        collective: ``r1  waiting  in -  done 0#8 all_reduce(sum) float32[577]  ◀ r0,r2 wait for it``."""
        inside = bool(row.last_entered) and row.last_entered != row.last_completed
        entered = f"{row.last_entered} {row.what}".strip() if inside else "-"
        completed = row.last_completed or "-"
        if not inside and row.what and row.last_completed:
            completed += f" {row.what}"
        words = [f"{row.rank:<3}", f"{row.status:<7}", f"in {entered}", f"done {completed}"]
        if row.waits_on:
            words.append(f"waits on {','.join(row.waits_on)}")
        if row.waited_by:
            words.append(f"◀ {','.join(row.waited_by)} wait for it")
        return "  ".join(words)

    @property
    def since_text(self) -> str:
        """When the waiting began (the latest entry among the ranks), for the subtitle."""
        times = [row.t_enter_ns for row in self.rows if row.t_enter_ns is not None]
        return f"waiting since {exact_time(max(times), self.unit)}" if times else ""

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="ellipsis")
        for index, row in enumerate(self.rows):
            if index:
                text.append("\n")
            style = "flight-recorder--culprit" if row.waited_by else "flight-recorder--waiting"
            text.append(self.row_text(row), self.get_component_rich_style(style, partial=True))
        return text
