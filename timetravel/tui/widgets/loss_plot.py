"""LossPlot: two runs' loss curves on one plot — where does the failing future leave the good one?

Both curves share one time axis and one value scale. Run a is drawn ``●``, run b ``○``, and a
column where both land on the same cell ``◉``: a stretch of ``◉`` is where the two futures still
agree, and the first column where they split is visible by eye. A non-finite loss is drawn at the
top row, where a blow-up belongs. The left gutter shows the scale, the bottom line the time range.

With ``compare --reference FILE`` a third curve joins them, a real run's logged losses (``×``;
``⊕`` where it meets a simulated curve), and the x axis is the step (``by_step``): the k-th value a
branch logged on the reference node is matched to the file's k-th step, as the CLI matches them.
"""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.reactive import reactive
from textual.widget import Widget

from timetravel.tui.charts import column_values, hold_gaps, plot_rows, value_range
from timetravel.tui.css import component_classes, css_beside
from timetravel.tui.describe import number_text
from timetravel.tui.safe_lines import TerminalSafeLines
from timetravel.tui.timefmt import short_time

GUTTER_COLUMNS = 7
GLYPHS = {1: "●", 2: "○", 3: "◉", 4: "×", 5: "⊕", 6: "⊕", 7: "⊕"}
STYLES = {1: "a", 2: "b", 3: "both", 4: "reference", 5: "agree", 6: "agree", 7: "agree"}

Points = tuple[tuple[int, float], ...]


class LossPlot(TerminalSafeLines, Widget):
    """Two loss curves on one plot. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)
    COMPONENT_CLASSES: ClassVar[set[str]] = component_classes(
        "loss-plot", "a", "b", "both", "reference", "agree", "axis"
    )

    curve_a: reactive[Points] = reactive(())
    curve_b: reactive[Points] = reactive(())
    label_a: reactive[str] = reactive("a")
    label_b: reactive[str] = reactive("b")
    reference: reactive[Points] = reactive(())
    """A real run's losses (``compare --reference``), by step like the curves then are."""
    by_step: reactive[bool] = reactive(False)
    """The x values are step numbers, not times (with a reference)."""
    what: reactive[str] = reactive("loss")

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.border_title = "loss"

    def watch_label_a(self) -> None:
        self._update_title()

    def watch_label_b(self) -> None:
        self._update_title()

    def watch_reference(self) -> None:
        self._update_title()

    def watch_what(self) -> None:
        self._update_title()

    def _update_title(self) -> None:
        title = f"{self.what} · ● {self.label_a}  ○ {self.label_b}  ◉ both"
        if self.reference:
            title += "  × reference  ⊕ meets it"
        self.border_title = title

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"loss-plot--{name}", partial=True)

    @property
    def time_range(self) -> tuple[int, int]:
        times = [t for t, _ in self.curve_a] + [t for t, _ in self.curve_b] + [t for t, _ in self.reference]
        return (min(times), max(times)) if times else (0, 1)

    def columns(self) -> list[list[float | None]]:
        """Each curve's value per column (a, b, then the reference when there is one)."""
        width = max(1, self.content_size.width - GUTTER_COLUMNS)
        start, end = self.time_range
        curves = [self.curve_a, self.curve_b] + ([self.reference] if self.reference else [])
        return [hold_gaps(column_values(curve, start, end, width)) for curve in curves]

    def _x_text(self, value: int) -> str:
        return f"step {value}" if self.by_step else short_time(value)

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="crop")
        if not self.curve_a and not self.curve_b:
            text.append("no loss metric in these runs", self._style("axis"))
            return text
        height = max(1, self.content_size.height - 1)
        curves = self.columns()
        grid = plot_rows(curves, height)
        low, high = value_range([value for values in curves for value in values])
        for row_index, row in enumerate(grid):
            if row_index:
                text.append("\n")
            gutter = (
                number_text(high) if row_index == 0 else number_text(low) if row_index == height - 1 else ""
            )
            text.append(gutter.rjust(GUTTER_COLUMNS - 1)[: GUTTER_COLUMNS - 1] + "┤", self._style("axis"))
            for bits in row:
                text.append(GLYPHS.get(bits, " "), self._style(STYLES[bits]) if bits else Style())
        start, end = self.time_range
        width = max(1, self.content_size.width - GUTTER_COLUMNS)
        left, right = self._x_text(start), self._x_text(end)
        text.append(
            "\n" + " " * GUTTER_COLUMNS + left + right.rjust(max(0, width - len(left))), self._style("axis")
        )
        return text
