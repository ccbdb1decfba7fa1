"""The timeline's rank rows: each rank's collectives as spans and its optimizer steps as marks.

One row a rank, on the timeline's own axis. A collective is drawn from the rank's call to the
result reaching it: ``━`` over its columns, labelled ``all_reduce 0#9`` (op, group#seq) when the
span is wide enough, else the op's first letter; a collective that never completed (a hang) is
drawn to the end of the view in the ``hung`` style. An optimizer step's end is ``│`` (a step mark
wins its column). Zoom in (``+``) to read the labels of short collectives.

Pure functions of plain data (the widget passes its axis and styles), tested without textual.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from rich.style import Style
from rich.text import Text

from timetravel.tui.model import CollectiveSpan, StepMark

SPAN_GLYPH = "━"
STEP_GLYPH = "│"
LANE_ROWS_MAX = 16
"""Rank rows drawn at most (a bigger world shows its first ranks and says how many more)."""

Column = Callable[[int], int | None]


def _clip(column: Column, columns: int, start_ns: int, end_ns: int, t_ns: int) -> int | None:
    """The column of ``t_ns``, clamped into the view when the span crosses its edge."""
    if t_ns < start_ns:
        return 0
    if t_ns > end_ns:
        return columns - 1
    return column(t_ns)


def lane_line(
    rank: str,
    spans: Sequence[CollectiveSpan],
    steps: Sequence[StepMark],
    *,
    column: Column,
    columns: int,
    start_ns: int,
    end_ns: int,
    style: Callable[[str], Style],
) -> Text:
    """One rank's row: its spans (``span``/``hung`` styles) and step marks (``step`` style)."""
    cells: list[tuple[str, str] | None] = [None] * columns
    for span in spans:
        if span.rank != rank:
            continue
        stop = end_ns if span.t_end_ns is None else span.t_end_ns
        if stop < start_ns or span.t_start_ns > end_ns:
            continue
        first = _clip(column, columns, start_ns, end_ns, span.t_start_ns)
        last = _clip(column, columns, start_ns, end_ns, stop)
        if first is None or last is None:
            continue
        kind = "hung" if span.t_end_ns is None else "span"
        width = last - first + 1
        label = span.label if width > len(span.label) else span.op[:1]
        text = (label + SPAN_GLYPH * width)[:width] if width > 1 or not label else label[:1]
        for offset, glyph in enumerate(text):
            cells[first + offset] = (glyph, kind)
    for mark in steps:
        if mark.rank == rank and start_ns <= mark.t_ns <= end_ns:
            where = column(mark.t_ns)
            if where is not None:
                cells[where] = (STEP_GLYPH, "step")
    line = Text()
    for cell in cells:
        if cell is None:
            line.append(" ")
        else:
            line.append(cell[0], style(cell[1]))
    return line


def lane_rows(ranks: Sequence[str]) -> tuple[list[str], int]:
    """The ranks given a row (at most :data:`LANE_ROWS_MAX`) and how many are left out."""
    shown = list(ranks[:LANE_ROWS_MAX])
    return shown, len(ranks) - len(shown)
