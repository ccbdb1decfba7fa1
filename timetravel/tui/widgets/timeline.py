"""Timeline: the run along logical time — where it failed, where the faults fired, where to jump.

Question it answers: *when did this go wrong, and where can I rewind to?* One row of marks
(snapshots ``┆``, faults ``↯``, branch points ``◆``, failures ``✖``), an axis with ticks and
their times, the loss as a sparkline (``!`` where it is not finite) and, once computed, the
failure likelihood of futures branched at each moment; its first column at rate 1 is the point of
no return (``▲``), where the damage is already in the state.

The cursor moves with the arrow keys (one column, shift: ten), ``[``/``]`` (previous/next mark),
home/end, and the mouse (click or drag). Scrubbing moves the cursor at once and posts
:class:`Timeline.Scrubbed`; the owner seeks and may set ``cursor_ns`` back to where the seek landed
(setting the attribute posts nothing). ``+``/``-`` zoom around the cursor, ``0`` shows everything.
Scrub steps are round times (1, 2 or 5 times a power of ten) of at least one column.

A torch run adds one row per rank under the curves (``TimelineData.lanes``): its collectives as
spans labelled ``all_reduce 0#9`` and its optimizer steps as ``│`` (:mod:`timetravel.tui.lane_text`);
the widget grows by a line a rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from timetravel.tui.charts import column_values, curve_array, hold_gaps, nice_step, sparkline_glyphs
from timetravel.tui.css import component_classes, css_beside
from timetravel.tui.lane_text import lane_line, lane_rows
from timetravel.tui.model import MARK_KINDS, TimelineData, TimeMark
from timetravel.tui.safe_lines import TerminalSafeLines
from timetravel.tui.timefmt import exact_time, short_time

GUTTER_COLUMNS = 6
MARK_GLYPHS = {"snapshot": "┆", "fault": "↯", "branch": "◆", "failure": "✖", "cursor": "▼"}
NO_RETURN_GLYPH = "▲"
POINT_OF_NO_RETURN_RATE = 1.0
"""The failure rate at which a moment is past the point of no return (every sampled future failed)."""
TICK_SPACING_COLUMNS = 12
SCRUB_FAST_COLUMNS = 10
ZOOM_FACTOR = 2
EMPTY_DATA = TimelineData(0, 1)
BASE_HEIGHT = 6
"""The border line and five rows (marks, axis, labels, loss, likelihood); a rank row adds one."""


@dataclass(frozen=True)
class Axis:
    """The view's mapping from time to columns, read once per drawing (reactives cost a call each)."""

    start_ns: int
    end_ns: int
    columns: int

    def column(self, t_ns: int) -> int | None:
        """The column showing ``t_ns``, or None when it is outside the view."""
        if not self.start_ns <= t_ns <= self.end_ns:
            return None
        span = max(self.end_ns - self.start_ns, 1)
        return min((t_ns - self.start_ns) * self.columns // span, self.columns - 1)


class Timeline(TerminalSafeLines, Widget, can_focus=True):
    """The run's logical time axis with the cursor. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)
    COMPONENT_CLASSES: ClassVar[set[str]] = component_classes(
        "timeline",
        "cursor",
        "gutter",
        "axis",
        "snapshot",
        "fault",
        "branch",
        "failure",
        "loss",
        "nonfinite",
        "likelihood",
        "no-return",
        "span",
        "hung",
        "step",
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "left",
            "scrub(-1)",
            "back",
            show=False,
            tooltip="cursor back one step (a round time of at least one column)",
        ),
        Binding("right", "scrub(1)", "forward", show=False, tooltip="cursor forward one step"),
        Binding("shift+left", "scrub(-10)", "back x10", show=False, tooltip="cursor back ten steps"),
        Binding("shift+right", "scrub(10)", "forward x10", show=False, tooltip="cursor forward ten steps"),
        Binding("home", "to_edge(-1)", "start", show=False, tooltip="cursor to the start of the run"),
        Binding("end", "to_edge(1)", "end", show=False, tooltip="cursor to the end of the run"),
        Binding(
            "left_square_bracket",
            "jump_mark(-1)",
            "prev mark",
            tooltip="previous fault, branch point or failure",
        ),
        Binding(
            "right_square_bracket", "jump_mark(1)", "next mark", tooltip="next fault, branch point or failure"
        ),
        Binding("plus,equals_sign", "zoom(1)", "zoom in", show=False, tooltip="zoom in around the cursor"),
        Binding("minus", "zoom(-1)", "zoom out", show=False, tooltip="zoom out"),
        Binding("0", "zoom(0)", "zoom all", show=False, tooltip="show the whole run"),
    ]

    data: reactive[TimelineData] = reactive(EMPTY_DATA)
    cursor_ns: reactive[int] = reactive(0)
    view_start_ns: reactive[int] = reactive(0)
    view_end_ns: reactive[int] = reactive(1)

    class Scrubbed(Message):
        """The user moved the cursor to ``t_ns``; ``final`` is False while a mouse drag goes on."""

        def __init__(self, timeline: Timeline, t_ns: int, final: bool = True) -> None:
            super().__init__()
            self.timeline = timeline
            self.t_ns = t_ns
            self.final = final

        @property
        def control(self) -> Timeline:
            return self.timeline

    def __init__(
        self,
        data: TimelineData | None = None,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._dragging = False
        self._curves: dict[str, tuple[object, np.ndarray]] = {}
        if data is not None:
            self.set_reactive(Timeline.data, data)
            self.set_reactive(Timeline.view_start_ns, data.t_start_ns)
            self.set_reactive(Timeline.view_end_ns, data.t_end_ns)
            self.set_reactive(Timeline.cursor_ns, data.t_start_ns)
        self.border_title = "timeline"

    def on_mount(self) -> None:
        shown, hidden = lane_rows(self.data.lanes)
        self.styles.height = BASE_HEIGHT + len(shown) + (1 if hidden else 0)
        self._update_subtitle()

    # -- attributes -----------------------------------------------------------------------------

    def _curve(self, name: str) -> np.ndarray:
        """Curve ``name`` of the data as a numpy array, converted once per data (runs have 10^5 points)."""
        points = getattr(self.data, name)
        cached = self._curves.get(name)
        if cached is None or cached[0] is not points:
            cached = self._curves[name] = (points, curve_array(points))
        return cached[1]

    def watch_data(self, old: TimelineData, new: TimelineData) -> None:
        if (old.t_start_ns, old.t_end_ns) != (new.t_start_ns, new.t_end_ns):
            self.view_start_ns, self.view_end_ns = new.t_start_ns, new.t_end_ns
        self.cursor_ns = self._clamp(self.cursor_ns)
        shown, hidden = lane_rows(new.lanes)
        self.styles.height = BASE_HEIGHT + len(shown) + (1 if hidden else 0)
        self._update_subtitle()

    def validate_cursor_ns(self, value: int) -> int:
        return self._clamp(value)

    def watch_cursor_ns(self, value: int) -> None:
        span = self.view_end_ns - self.view_start_ns
        if value < self.view_start_ns:
            self.view_start_ns, self.view_end_ns = value, value + span
        elif value > self.view_end_ns:
            self.view_start_ns, self.view_end_ns = value - span, value
        self._update_subtitle()

    def _clamp(self, t_ns: int) -> int:
        return max(self.data.t_start_ns, min(self.data.t_end_ns, t_ns))

    # -- geometry -------------------------------------------------------------------------------

    @property
    def columns(self) -> int:
        """Screen columns along the axis (the content width less the label gutter)."""
        return max(self.content_size.width - GUTTER_COLUMNS, 1)

    def column_start_ns(self, column: int) -> int:
        span = self.view_end_ns - self.view_start_ns
        return self.view_start_ns + column * span // self.columns

    @property
    def axis(self) -> Axis:
        return Axis(self.view_start_ns, self.view_end_ns, self.columns)

    def column_of(self, t_ns: int) -> int | None:
        """The column showing ``t_ns``, or None when it is outside the view."""
        return self.axis.column(t_ns)

    @property
    def step_ns(self) -> int:
        """One scrub step: a round time of at least one column."""
        span = self.view_end_ns - self.view_start_ns
        return nice_step(span / self.columns)

    @property
    def point_of_no_return_ns(self) -> int | None:
        """The first time at which every sampled future failed, once likelihood is known."""
        for t_ns, rate in self.data.likelihood:
            if rate >= POINT_OF_NO_RETURN_RATE:
                return t_ns
        return None

    def marks_near_cursor(self) -> list[TimeMark]:
        """The marks that share the cursor's column (most severe first)."""
        axis = self.axis
        cursor_column = axis.column(self.cursor_ns)
        found = [mark for mark in self.data.marks if axis.column(mark.t_ns) == cursor_column]
        return sorted(found, key=lambda mark: -MARK_KINDS.index(mark.kind))

    # -- actions --------------------------------------------------------------------------------

    def _move_to(self, t_ns: int, final: bool = True) -> None:
        t_ns = self._clamp(t_ns)
        self.cursor_ns = t_ns
        self.post_message(self.Scrubbed(self, t_ns, final))

    def action_scrub(self, steps: int) -> None:
        step = self.step_ns
        if steps > 0:
            target = (self.cursor_ns // step + steps) * step
        else:
            target = (-(-self.cursor_ns // step) + steps) * step
        self._move_to(target)

    def action_to_edge(self, direction: int) -> None:
        self._move_to(self.data.t_end_ns if direction > 0 else self.data.t_start_ns)

    def action_jump_mark(self, direction: int) -> None:
        times = sorted({mark.t_ns for mark in self.data.marks if mark.kind != "snapshot"})
        if direction > 0:
            later = [t for t in times if t > self.cursor_ns]
            if later:
                self._move_to(later[0])
        else:
            earlier = [t for t in times if t < self.cursor_ns]
            if earlier:
                self._move_to(earlier[-1])

    def action_zoom(self, direction: int) -> None:
        full_start, full_end = self.data.t_start_ns, self.data.t_end_ns
        span = self.view_end_ns - self.view_start_ns
        if direction == 0:
            span = full_end - full_start
        elif direction > 0:
            span = max(span // ZOOM_FACTOR, self.columns)
        else:
            span = min(span * ZOOM_FACTOR, full_end - full_start)
        start = max(full_start, min(self.cursor_ns - span // 2, full_end - span))
        self.view_start_ns, self.view_end_ns = start, start + span

    # -- mouse ----------------------------------------------------------------------------------

    def _time_at(self, event: events.MouseEvent) -> int | None:
        offset = event.get_content_offset_capture(self)
        column = offset.x - GUTTER_COLUMNS
        if column < 0 and not self._dragging:
            return None
        column = max(0, min(self.columns - 1, column))
        step = self.step_ns
        return round(self.column_start_ns(column) / step) * step

    def on_mouse_down(self, event: events.MouseDown) -> None:
        t_ns = self._time_at(event)
        if t_ns is None:
            return
        self._dragging = True
        self.capture_mouse()
        self._move_to(t_ns, final=False)

    def on_mouse_move(self, event: events.MouseMove) -> None:
        if not self._dragging:
            return
        t_ns = self._time_at(event)
        if t_ns is not None and t_ns != self.cursor_ns:
            self._move_to(t_ns, final=False)

    def on_mouse_up(self, event: events.MouseUp) -> None:
        if not self._dragging:
            return
        self._dragging = False
        self.release_mouse()
        self._move_to(self.cursor_ns, final=True)

    # -- drawing --------------------------------------------------------------------------------

    def _update_subtitle(self) -> None:
        unit = self.data.unit
        text = f"cursor {exact_time(self.cursor_ns, unit)}"
        marks = [mark for mark in self.marks_near_cursor() if mark.kind != "snapshot"]
        if marks:
            mark = marks[0]
            text += f" · {MARK_GLYPHS[mark.kind]} {mark.label or mark.kind} @{exact_time(mark.t_ns, unit)}"
        no_return = self.point_of_no_return_ns
        if no_return is not None:
            text += f" · no return {exact_time(no_return, unit)}"
        self.border_subtitle = text

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"timeline--{name}", partial=True)

    def render(self) -> Text:
        axis = self.axis
        cursor_column = axis.column(self.cursor_ns)
        lines = [
            self._marks_line(axis, cursor_column),
            self._axis_line(axis),
            self._labels_line(axis),
            self._loss_line(axis),
            self._likelihood_line(axis),
            *self._lane_lines(axis),
        ]
        text = Text(no_wrap=True, overflow="crop")
        for index, (gutter, line) in enumerate(lines):
            if index:
                text.append("\n")
            text.append(gutter.ljust(GUTTER_COLUMNS)[:GUTTER_COLUMNS], self._style("gutter"))
            if cursor_column is not None and index != 2:
                line.stylize(self._style("cursor"), cursor_column, cursor_column + 1)
            text.append_text(line)
        return text

    def _marks_line(self, axis: Axis, cursor_column: int | None) -> tuple[str, Text]:
        cells: list[str | None] = [None] * axis.columns
        for mark in self.data.marks:
            column = axis.column(mark.t_ns)
            if column is None:
                continue
            current = cells[column]
            if current is None or MARK_KINDS.index(mark.kind) > MARK_KINDS.index(current):
                cells[column] = mark.kind
        line = Text()
        for column, kind in enumerate(cells):
            if column == cursor_column:
                # The cursor always shows as ``▼``: drawn as the mark beneath it, reversed, it hid
                # among a run of ``↯``. The subtitle names the mark under the cursor.
                line.append(MARK_GLYPHS["cursor"], self._style(kind) if kind is not None else "")
            elif kind is None:
                line.append(" ")
            else:
                line.append(MARK_GLYPHS[kind], self._style(kind))
        return "marks", line

    def _ticks(self, axis: Axis) -> list[tuple[int, int]]:
        span = axis.end_ns - axis.start_ns
        step = nice_step(span * TICK_SPACING_COLUMNS / axis.columns)
        first = -(-axis.start_ns // step) * step
        ticks = []
        for t_ns in range(first, axis.end_ns + 1, step):
            column = axis.column(t_ns)
            if column is not None:
                ticks.append((column, t_ns))
        return ticks

    def _axis_line(self, axis: Axis) -> tuple[str, Text]:
        chars = ["─"] * axis.columns
        for column, _ in self._ticks(axis):
            chars[column] = "┬"
        return "", Text("".join(chars), self._style("axis"))

    def _labels_line(self, axis: Axis) -> tuple[str, Text]:
        columns = axis.columns
        chars = [" "] * columns
        free_from = 0
        for column, t_ns in self._ticks(axis):
            label = short_time(t_ns)
            if column < free_from or column + len(label) > columns:
                continue
            chars[column : column + len(label)] = label
            free_from = column + len(label) + 1
        return self.data.unit, Text("".join(chars), self._style("axis"))

    def _loss_line(self, axis: Axis) -> tuple[str, Text]:
        columns = axis.columns
        if not self.data.loss:
            return "loss", Text("no loss metric in this run"[:columns], self._style("gutter"))
        values = hold_gaps(column_values(self._curve("loss"), axis.start_ns, axis.end_ns, columns))
        line = Text()
        for glyph in sparkline_glyphs(values):
            line.append(glyph, self._style("nonfinite" if glyph == "!" else "loss"))
        return "loss", line

    def _lane_lines(self, axis: Axis) -> list[tuple[str, Text]]:
        shown, hidden = lane_rows(self.data.lanes)
        lines = [
            (
                rank,
                lane_line(
                    rank,
                    self.data.collectives,
                    self.data.steps,
                    column=axis.column,
                    columns=axis.columns,
                    start_ns=axis.start_ns,
                    end_ns=axis.end_ns,
                    style=self._style,
                ),
            )
            for rank in shown
        ]
        if hidden:
            lines.append(("", Text(f"… {hidden} more ranks", self._style("gutter"))))
        return lines

    def _likelihood_line(self, axis: Axis) -> tuple[str, Text]:
        columns = axis.columns
        if not self.data.likelihood:
            hint = "failure likelihood: run :likelihood"
            return "P(f)", Text(hint[:columns], self._style("gutter"))
        values = column_values(self._curve("likelihood"), axis.start_ns, axis.end_ns, columns, reduce="max")
        glyphs = sparkline_glyphs(values, 0.0, 1.0)
        no_return = self.point_of_no_return_ns
        no_return_column = None if no_return is None else axis.column(no_return)
        line = Text()
        for column, glyph in enumerate(glyphs):
            value = values[column]
            if column == no_return_column:
                line.append(NO_RETURN_GLYPH, self._style("no-return"))
            elif value is not None and (math.isnan(value) or value >= POINT_OF_NO_RETURN_RATE):
                line.append(glyph, self._style("no-return"))
            else:
                line.append(glyph, self._style("likelihood"))
        return "P(f)", line
