"""StreamsView: each rank's GPU streams around the cursor as a Gantt chart — what was it waiting on?

One row per (rank, stream): kernels are bars labelled with their names, compute and comm in two
colours, the cursor a reversed column. A race — two kernels of one rank touching a buffer with
no ordering edge between them — paints both bars red and draws the missing edge ``╳┆╳`` between
them where they overlap, with a line naming the buffer and both kernels. The line under the chart
says what each stream of the first rank is doing at the cursor (running which kernel, or idle
and for how long), which is the question behind a hang or a straggler.

The ranks shown are ``focus_ranks`` when set (the owner sets it from the rank grid), else the
ranks with races first and then the others, as many as fit. ``+``/``-`` zoom the time window,
up/down scroll the rows.
"""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Sequence
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.reactive import reactive
from textual.widget import Widget

from timetravel.tui.css import component_classes, css_beside
from timetravel.tui.model import KernelSpan, RaceEdge
from timetravel.tui.rank_layout import short_labels
from timetravel.tui.safe_lines import TerminalSafeLines
from timetravel.tui.timefmt import exact_time, short_time

LABEL_COLUMNS = 11
WINDOW_NS_MIN = 100
KERNELS_PER_WINDOW = 12
"""The automatic window shows about this many median kernels."""
EDGE_GLYPH = "┆"
RACE_END_GLYPH = "╳"
BAR_GLYPH = "▆"


def stream_rows(
    spans: Sequence[KernelSpan],
    races: Sequence[RaceEdge],
    focus: Sequence[str],
    preferred: Sequence[str] = (),
    t_ns: int | None = None,
) -> list[tuple[str, str]]:
    """The (rank, stream) rows: the focus ranks; else the racing ranks, then ``preferred`` (the
    odd ones out: the failing rank, the unhealthy ones), then the ranks with a kernel running at
    ``t_ns``, then the rest — each group in rank order (r2 before r10).

    Spans arrive in the world's node order, which is by name (r0, r1, r10, r11, ...): listed that
    way, the 16-rank demo filled the pane before r3, the rank that fails, ever showed."""
    streams: dict[str, list[str]] = {}
    busy: set[str] = set()
    for span in spans:
        names = streams.setdefault(span.rank, [])
        if span.stream not in names:
            names.append(span.stream)
        if t_ns is not None and span.t_start_ns <= t_ns < span.t_end_ns:
            busy.add(span.rank)
    if focus:
        ranks = [rank for rank in focus if rank in streams]
    else:
        racing = [rank for rank in dict.fromkeys(race.rank for race in races) if rank in streams]
        odd = [rank for rank in dict.fromkeys(preferred) if rank in streams and rank not in racing]
        first = {*racing, *odd}
        rest = sorted((rank for rank in streams if rank not in first), key=rank_order)
        ranks = [*racing, *odd, *(rank for rank in rest if rank in busy), *(r for r in rest if r not in busy)]
    return [(rank, stream) for rank in ranks for stream in sorted(streams[rank], key=_stream_order)]


def rank_order(name: str) -> tuple[str, int, str]:
    """``r2`` before ``r10``: a name's text before its trailing number, then the number."""
    stem = name.rstrip("0123456789")
    digits = name[len(stem) :]
    return (stem, int(digits) if digits else -1, name)


def _stream_order(stream: str) -> tuple[int, str]:
    return (1 if "comm" in stream else 0, stream)


def automatic_window_ns(spans: Sequence[KernelSpan]) -> int:
    """A half-window that shows about KERNELS_PER_WINDOW typical kernels."""
    durations = [span.t_end_ns - span.t_start_ns for span in spans if span.t_end_ns > span.t_start_ns]
    if not durations:
        return 1_000_000
    return max(WINDOW_NS_MIN, int(statistics.median(durations) * KERNELS_PER_WINDOW // 2))


def activity_at(spans: Sequence[KernelSpan], rank: str, stream: str, t_ns: int) -> str:
    """What ``stream`` of ``rank`` does at ``t_ns``: the kernel running, or idle since/until when."""
    mine = sorted(
        (span for span in spans if span.rank == rank and span.stream == stream), key=lambda s: s.t_start_ns
    )
    for span in mine:
        if span.t_start_ns <= t_ns < span.t_end_ns:
            return f"{stream}: {span.name} ({short_time(t_ns - span.t_start_ns)} in)"
    before = [span for span in mine if span.t_end_ns <= t_ns]
    after = [span for span in mine if span.t_start_ns > t_ns]
    if after:
        return f"{stream}: idle, {after[0].name} in {short_time(after[0].t_start_ns - t_ns)}"
    if before:
        return f"{stream}: idle {short_time(t_ns - before[-1].t_end_ns)} since {before[-1].name}"
    return f"{stream}: idle"


class StreamsView(TerminalSafeLines, Widget, can_focus=True):
    """A Gantt chart of GPU streams around the cursor. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)
    COMPONENT_CLASSES: ClassVar[set[str]] = component_classes(
        "streams", "label", "compute", "comm", "compute-alt", "comm-alt", "race", "edge", "cursor", "detail"
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding(
            "plus,equals_sign",
            "zoom(1)",
            "zoom in",
            show=False,
            tooltip="narrow the time window around the cursor",
        ),
        Binding("minus", "zoom(-1)", "zoom out", show=False, tooltip="widen the time window"),
        Binding("up", "scroll_rows(-1)", "up", show=False, tooltip="scroll the streams up"),
        Binding("down", "scroll_rows(1)", "down", show=False, tooltip="scroll the streams down"),
    ]

    spans: reactive[tuple[KernelSpan, ...]] = reactive(())
    races: reactive[tuple[RaceEdge, ...]] = reactive(())
    cursor_ns: reactive[int] = reactive(0)
    focus_ranks: reactive[tuple[str, ...]] = reactive(())
    preferred_ranks: reactive[tuple[str, ...]] = reactive(())
    """Listed first after racing ranks when no rank is focused: the odd ones out (set by the owner)."""
    window_ns: reactive[int] = reactive(0)
    row_offset: reactive[int] = reactive(0)
    unit: reactive[str] = reactive("ms")

    def __init__(
        self,
        spans: Sequence[KernelSpan] = (),
        races: Sequence[RaceEdge] = (),
        *,
        cursor_ns: int = 0,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.set_reactive(StreamsView.spans, tuple(spans))
        self.set_reactive(StreamsView.races, tuple(races))
        self.set_reactive(StreamsView.cursor_ns, cursor_ns)
        self.border_title = "streams"

    # -- geometry -------------------------------------------------------------------------------

    @property
    def half_window_ns(self) -> int:
        return self.window_ns or automatic_window_ns(self.spans)

    @property
    def rows(self) -> list[tuple[str, str]]:
        return stream_rows(self.spans, self.races, self.focus_ranks, self.preferred_ranks, self.cursor_ns)

    @property
    def chart_columns(self) -> int:
        return max(1, self.content_size.width - LABEL_COLUMNS)

    def column_of(self, t_ns: int) -> int:
        start = self.cursor_ns - self.half_window_ns
        return (t_ns - start) * self.chart_columns // (2 * self.half_window_ns)

    @property
    def visible_races(self) -> list[RaceEdge]:
        shown = {rank for rank, _ in self.rows}
        return [race for race in self.races if race.rank in shown]

    # -- actions --------------------------------------------------------------------------------

    def action_zoom(self, direction: int) -> None:
        half = self.half_window_ns
        self.window_ns = max(WINDOW_NS_MIN, half // 2) if direction > 0 else half * 2

    def action_scroll_rows(self, delta: int) -> None:
        self.row_offset = max(0, min(len(self.rows) - 1, self.row_offset + delta))

    # -- drawing --------------------------------------------------------------------------------

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"streams--{name}", partial=True)

    def render(self) -> Text:
        text = Text(no_wrap=True, overflow="crop")
        if not self.spans:
            text.append("no GPU stream activity in this run", self._style("detail"))
            return text
        races = self.visible_races
        footer = self._footer_lines(races)
        rows = self.rows[self.row_offset :]
        room = max(1, self.content_size.height - 1 - len(footer))
        rows = rows[:room]
        text.append_text(self._axis_line())
        grid = [self._row_cells(rank, stream) for rank, stream in rows]
        self._draw_races(grid, rows, races)
        labels = short_labels([rank for rank, _ in rows])
        cursor = self.column_of(self.cursor_ns)
        for (rank, stream), cells in zip(rows, grid, strict=True):
            text.append("\n")
            label = f"r{labels[rank]} {stream}"[: LABEL_COLUMNS - 1]
            text.append(label.ljust(LABEL_COLUMNS), self._style("label"))
            for column, (glyph, style_name) in enumerate(cells):
                style = self._style(style_name) if style_name else Style()
                if column == cursor:
                    style = style + self._style("cursor")
                text.append(glyph, style)
        for line in footer:
            text.append("\n")
            text.append_text(line)
        return text

    def _axis_line(self) -> Text:
        half = self.half_window_ns
        left = f"-{short_time(half)}"
        middle = f"▼{exact_time(self.cursor_ns, self.unit)}"
        right = f"+{short_time(half)}"
        width = self.chart_columns
        line = [" "] * width
        line[: len(left)] = left
        centre = max(len(left) + 1, self.column_of(self.cursor_ns))
        line[centre : centre + len(middle)] = middle
        line[width - len(right) :] = right
        return Text(" " * LABEL_COLUMNS + "".join(line)[:width], self._style("label"))

    def _row_cells(self, rank: str, stream: str) -> list[tuple[str, str]]:
        width = self.chart_columns
        cells: list[tuple[str, str]] = [(" ", "")] * width
        racing = {key for race in self.races if race.rank == rank for key in (race.first, race.second)}
        kind = "comm" if "comm" in stream else "compute"
        mine = sorted(
            (span for span in self.spans if span.rank == rank and span.stream == stream),
            key=lambda span: span.t_start_ns,
        )
        for position, span in enumerate(mine):
            first = max(0, self.column_of(span.t_start_ns))
            last = min(width - 1, self.column_of(max(span.t_end_ns - 1, span.t_start_ns)))
            if last < 0 or first >= width:
                continue
            style = "race" if span.key in racing else kind + ("-alt" if position % 2 else "")
            label = span.name[: last - first + 1]
            for column in range(first, last + 1):
                offset = column - first
                glyph = label[offset] if offset < len(label) else BAR_GLYPH
                cells[column] = (glyph, style)
        return cells

    def _draw_races(
        self, grid: list[list[tuple[str, str]]], rows: Sequence[tuple[str, str]], races: Sequence[RaceEdge]
    ) -> None:
        by_key = {(span.rank, span.key): span for span in self.spans}
        row_of = {row: index for index, row in enumerate(rows)}
        for race in races:
            first = by_key.get((race.rank, race.first))
            second = by_key.get((race.rank, race.second))
            if first is None or second is None:
                continue
            first_row = row_of.get((race.rank, first.stream))
            second_row = row_of.get((race.rank, second.stream))
            if first_row is None or second_row is None:
                continue
            column = self.column_of(max(first.t_start_ns, second.t_start_ns))
            if not 0 <= column < self.chart_columns:
                continue
            top, bottom = sorted((first_row, second_row))
            for row in range(top, bottom + 1):
                glyph = RACE_END_GLYPH if row in (top, bottom) else EDGE_GLYPH
                grid[row][column] = (glyph, "edge")

    def _footer_lines(self, races: Sequence[RaceEdge]) -> list[Text]:
        lines = []
        by_key = {(span.rank, span.key): span for span in self.spans}
        for race in races:
            names = [
                f"{span.stream}:{span.name}" if span else key
                for key, span in ((key, by_key.get((race.rank, key))) for key in (race.first, race.second))
            ]
            text = f"╳ race on {race.rank}: {race.buffer} — {names[0]} and {names[1]}, no ordering edge"
            lines += [Text(part, self._style("edge")) for part in self._wrap(text)]
        rows = self.rows
        if rows:
            rank = rows[0][0]
            streams = [stream for row_rank, stream in rows if row_rank == rank]
            words = [activity_at(self.spans, rank, stream, self.cursor_ns) for stream in streams]
            text = f"{rank} at cursor: " + " · ".join(words)
            lines += [Text(part, self._style("detail")) for part in self._wrap(text)]
        return lines

    def _wrap(self, text: str) -> list[str]:
        return textwrap.wrap(text, max(10, self.content_size.width), subsequent_indent="  ") or [""]
