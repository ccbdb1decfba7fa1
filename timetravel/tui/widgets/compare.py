"""CompareView: two futures side by side — what changed between them, and from when?

The header gives both outcomes and the first divergence (the first event whose effects differ,
found by the explore engine); the view opens at that moment. The table lists every state path that
differs at that time with the engine's summary of the difference (for arrays: how many elements,
the largest absolute and ULP difference, NaN/Inf counts); paths where a NaN or inf appears are
red, the rest highlighted; enter on a row posts :class:`CompareView.PathChosen` so the owner
opens that path's diff. Under it, both loss curves on one plot (:class:`LossPlot`). After
``compare A B --reference FILE`` the header ends with a verdict per branch (the first step outside
``--rtol``) and the plot shows the compared metric by step with the real run's curve over it.
"""

from __future__ import annotations

import re
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.app import ComposeResult
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget
from textual.widgets import DataTable, Static

from timetravel.explore.commands.render import event_refs
from timetravel.tui.css import component_classes, css_beside
from timetravel.tui.model import BranchInfo, CompareData
from timetravel.tui.safe_lines import SafeDataTable, SafeStatic
from timetravel.tui.timefmt import exact_time
from timetravel.tui.widgets.branch_tree import OUTCOME_GLYPHS
from timetravel.tui.widgets.loss_plot import LossPlot

ALARM_PATTERN = re.compile(r"\b(nan|inf)\b(?:\s+(\d+)(?:\s*->\s*(\d+))?)?", re.IGNORECASE)
COLUMNS = ("path", "difference")


def has_alarm(summary: str) -> bool:
    """True when a diff summary shows a NaN or inf on either side (``NaN 0 -> 64``, ``1.0 -> nan``)."""
    for match in ALARM_PATTERN.finditer(summary):
        counts = [int(group) for group in match.groups()[1:] if group is not None]
        if not counts or any(counts):
            return True
    return False


HEADER_LINES = 7
OPS_LINES_MAX = 18


class CompareView(Widget):
    """Two runs compared. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)
    COMPONENT_CLASSES: ClassVar[set[str]] = component_classes(
        "compare", "pass", "fail", "muted", "changed", "alarm"
    )

    data: reactive[CompareData | None] = reactive(None, always_update=True)

    class PathChosen(Message):
        """The user chose to open the diff of ``path`` between runs ``a`` and ``b``."""

        def __init__(self, view: CompareView, path: str, a: str, b: str, at_ns: int) -> None:
            super().__init__()
            self.view = view
            self.path = path
            self.a = a
            self.b = b
            self.at_ns = at_ns

        @property
        def control(self) -> CompareView:
            return self.view

    def __init__(
        self,
        data: CompareData | None = None,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.set_reactive(CompareView.data, data)

    def compose(self) -> ComposeResult:
        yield SafeStatic(id="compare-header")
        table = SafeDataTable(id="compare-table", cursor_type="row", zebra_stripes=True)
        yield table
        yield LossPlot()

    def on_mount(self) -> None:
        table = self.query_one("#compare-table", DataTable)
        for column in COLUMNS:
            table.add_column(column, key=column)
        self._show()

    def watch_data(self) -> None:
        if self.is_mounted:
            self._show()

    # -- drawing --------------------------------------------------------------------------------

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"compare--{name}", partial=True)

    def _run_line(self, tag: str, run: BranchInfo) -> Text:
        line = Text(f"{tag} {run.name:<8} ")
        style = self._style(run.outcome) if run.outcome in ("pass", "fail") else self._style("muted")
        line.append(f"{OUTCOME_GLYPHS[run.outcome]} {run.outcome}", style)
        if run.failure:
            line.append(f"  {run.failure}", self._style("fail"))
        if run.changes:
            line.append(f"  ({run.changes})", self._style("muted"))
        return line

    def header_text(self) -> Text:
        data = self.data
        if data is None:
            return Text("nothing to compare yet: pick two branches and press c", self._style("muted"))
        text = Text(no_wrap=True, overflow="ellipsis")
        text.append_text(self._run_line("a", data.a))
        text.append("\n")
        text.append_text(self._run_line("b", data.b))
        text.append("\n")
        divergence = data.first_divergence
        if divergence is None:
            text.append("no divergence: the two runs' effects are identical", self._style("muted"))
        else:
            where = f" on {divergence.node}" if divergence.node else ""
            seqs = f" ({event_refs(divergence.event_a, divergence.event_b)})"
            text.append(f"first divergence {exact_time(divergence.t_ns, data.unit)}: ")
            what = f"{divergence.kind}{where}"
            if divergence.event_t_ns is not None:  # as `compare` prints it: the event came earlier
                what = f"completed by {what} at {exact_time(divergence.event_t_ns, data.unit)}"
            text.append(f"{what}{seqs}", self._style("changed"))
        count = len(data.entries)
        text.append(
            f"\nat {exact_time(data.at_ns, data.unit)}: {count} path{'s' if count != 1 else ''} differ"
        )
        if count:
            text.append(" · enter opens one", self._style("muted"))
        for line in data.reference:
            text.append("\n" + line, self._style("fail" if "outside rtol" in line else "muted"))
        for index, line in enumerate(data.ops):  # diff --ops: the first differing torch ops
            text.append("\n" + line, self._style("muted" if index == 0 else "changed"))
        return text

    def _cell(self, value: str) -> Text:
        return Text(value, self._style("alarm") if has_alarm(value) else self._style("muted"))

    def _show(self) -> None:
        header = self.query_one("#compare-header", Static)
        header.update(self.header_text())
        if self.data is not None and self.data.ops:  # room for diff --ops' lines (the CSS allows 7)
            header.styles.max_height = HEADER_LINES + min(len(self.data.ops), OPS_LINES_MAX)
        header.border_title = "compare"
        table = self.query_one("#compare-table", DataTable)
        table.clear()
        plot = self.query_one(LossPlot)
        data = self.data
        if data is None:
            plot.curve_a, plot.curve_b = (), ()
            return
        for entry in data.entries:
            style = self._style("alarm") if has_alarm(entry.summary) else self._style("changed")
            path = Text(entry.path, style)
            if entry.change != "changed":
                path.append(f" ({entry.change})", self._style("muted"))
            table.add_row(path, self._cell(entry.summary), key=entry.path)
        table.border_title = f"differing paths · {data.a.name} vs {data.b.name}"
        plot.label_a, plot.label_b = data.a.name, data.b.name
        if data.reference_curve:  # compare --reference: the compared metric by step, and the file's
            plot.what, plot.by_step = data.reference_what, True
            plot.curve_a, plot.curve_b = data.reference_a, data.reference_b
            plot.reference = data.reference_curve
        else:
            plot.what, plot.by_step, plot.reference = "loss", False, ()
            plot.curve_a, plot.curve_b = data.loss_a, data.loss_b

    @property
    def highlighted_path(self) -> str | None:
        table = self.query_one("#compare-table", DataTable)
        if self.data is None or not self.data.entries or table.cursor_row < 0:
            return None
        return self.data.entries[min(table.cursor_row, len(self.data.entries) - 1)].path

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        data = self.data
        if data is not None and event.row_key.value is not None:
            self.post_message(
                self.PathChosen(self, event.row_key.value, data.a.name, data.b.name, data.at_ns)
            )
