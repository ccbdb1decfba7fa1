"""A terminal plot of several curves in braille dots, with axes and a legend.

Each character cell is a 2×4 grid of braille dots (U+2800..U+28FF), so a plot ``width`` cells wide
and ``height`` cells tall has ``2·width × 4·height`` dots: enough to see a loss curve bend, jump or
flatten across branches without leaving the shell. Points are bucketed into dot columns by time
(the mean of the finite values in a column) and successive points are joined by a line of dots
(interpolated across empty columns, a vertical run where the curve moves fast), so a curve reads
as a line however many points it has.

A non-finite value is never averaged away: a column holding a NaN or an infinity is drawn as a
``!`` in the top row, in that curve's colour, and the legend says from when the curve is
non-finite (the NaN is usually what the user came for). With ``log_y`` the values are plotted as
``log10`` (a loss spans decades); values ≤ 0 cannot be placed and are counted in the legend.

Pure computation over plain lists; rich is used only for colour (``rich.text.Text``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text

from timetravel.sim.timefmt import DISPLAY_UNIT_DEFAULT, format_time

BRAILLE_BASE = 0x2800
DOT_BITS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
"""``DOT_BITS[x][y]``: the bit of the dot in column x (0, 1) and row y (0..3, top down) of a cell."""
NONFINITE_MARK = "!"
SERIES_COLORS = ("cyan", "magenta", "yellow", "green", "blue", "red", "bright_cyan", "bright_magenta")
PLOT_WIDTH_MAX = 400
PLOT_HEIGHT_MAX = 100
SERIES_MAX = len(SERIES_COLORS)
POINTS_MAX = 1_000_000
"""Bound on the points of one series (a curve per training step of a long run)."""
LABEL_WIDTH = 10


@dataclass(frozen=True)
class Series:
    """One curve: a label and its ``(t_ns, value)`` points in time order."""

    label: str
    points: Sequence[tuple[int, float]]


@dataclass(frozen=True)
class _Column:
    value: float | None
    nonfinite: bool


def plot(
    series: Sequence[Series],
    width: int = 60,
    height: int = 12,
    unit: str = DISPLAY_UNIT_DEFAULT,
    log_y: bool = False,
) -> list[Text]:
    """The plot's lines: ``height`` rows of dots with a y axis, an x axis and a legend."""
    _check(series, width, height)
    columns = 2 * width
    times = [t for curve in series for t, _ in curve.points]
    if not times:
        return [Text("(no points to plot)")]
    t_start, t_end = min(times), max(times)
    bucketed = [_bucket(curve.points, t_start, t_end, columns, log_y) for curve in series]
    finite = [column.value for curve in bucketed for column in curve if column.value is not None]
    low, high = _value_range(finite)
    cells = [[0] * width for _ in range(height)]
    marks: dict[tuple[int, int], str] = {}
    owners: dict[tuple[int, int], int] = {}
    for index, curve in enumerate(bucketed):
        _draw(curve, low, high, height, cells, marks, owners, index)
    lines = _rows(cells, marks, owners, low, high, log_y)
    lines.extend(_x_axis(t_start, t_end, width, unit))
    lines.extend(_legend(series, log_y, unit))
    return lines


def _check(series: Sequence[Series], width: int, height: int) -> None:
    if not 1 <= width <= PLOT_WIDTH_MAX or not 1 <= height <= PLOT_HEIGHT_MAX:
        raise ValueError(
            f"plot size {width}x{height} out of range (1..{PLOT_WIDTH_MAX} x 1..{PLOT_HEIGHT_MAX})"
        )
    if len(series) > SERIES_MAX:
        raise ValueError(f"at most {SERIES_MAX} curves in one plot")
    for curve in series:
        if len(curve.points) > POINTS_MAX:
            raise ValueError(f"curve {curve.label!r} has more than {POINTS_MAX} points")


def _transform(value: float, log_y: bool) -> float | None:
    """The plotted coordinate of a finite value (None: a log plot cannot place a value ≤ 0)."""
    if not log_y:
        return value
    return math.log10(value) if value > 0 else None


def _bucket(
    points: Sequence[tuple[int, float]], t_start: int, t_end: int, columns: int, log_y: bool
) -> list[_Column]:
    span = max(t_end - t_start, 1)
    sums = [0.0] * columns
    counts = [0] * columns
    bad = [False] * columns
    for t_ns, value in points:
        column = min((t_ns - t_start) * columns // span, columns - 1)
        if not math.isfinite(value):
            bad[column] = True
            continue
        coordinate = _transform(value, log_y)
        if coordinate is not None:
            sums[column] += coordinate
            counts[column] += 1
    return [
        _Column(None if bad[index] or not counts[index] else sums[index] / counts[index], bad[index])
        for index in range(columns)
    ]


def _value_range(values: Sequence[float]) -> tuple[float, float]:
    if not values:
        return 0.0, 1.0
    low, high = min(values), max(values)
    if low == high:
        pad = abs(low) * 0.1 or 1.0
        return low - pad, high + pad
    return low, high


def _draw(
    curve: list[_Column],
    low: float,
    high: float,
    height: int,
    cells: list[list[int]],
    marks: dict[tuple[int, int], str],
    owners: dict[tuple[int, int], int],
    index: int,
) -> None:
    rows = 4 * height
    previous: tuple[int, int] | None = None
    for column, bucket in enumerate(curve):
        if bucket.nonfinite:
            marks[(0, column // 2)] = NONFINITE_MARK
            owners[(0, column // 2)] = index
            previous = None
        if bucket.value is None:
            continue
        row = round((high - bucket.value) / (high - low) * (rows - 1))
        if previous is None:
            _dots(column, row, row, cells, owners, index)
        else:
            _join(previous, (column, row), cells, owners, index)
        previous = (column, row)


def _join(
    start: tuple[int, int],
    end: tuple[int, int],
    cells: list[list[int]],
    owners: dict[tuple[int, int], int],
    index: int,
) -> None:
    """A line from one dot to a later column's dot: per column, a vertical run to the interpolated row."""
    (column_a, row_a), (column_b, row_b) = start, end
    last_row = row_a
    for column in range(column_a + 1, column_b + 1):
        row = round(row_a + (row_b - row_a) * (column - column_a) / (column_b - column_a))
        _dots(column, min(row, last_row), max(row, last_row), cells, owners, index)
        last_row = row


def _dots(
    column: int,
    row_low: int,
    row_high: int,
    cells: list[list[int]],
    owners: dict[tuple[int, int], int],
    index: int,
) -> None:
    for dot_row in range(row_low, row_high + 1):
        cell_row, cell_column = dot_row // 4, column // 2
        cells[cell_row][cell_column] |= DOT_BITS[column % 2][dot_row % 4]
        owners[(cell_row, cell_column)] = index


def _number(value: float, log_y: bool) -> str:
    shown = 10**value if log_y else value
    return f"{shown:.4g}"


def _rows(
    cells: list[list[int]],
    marks: dict[tuple[int, int], str],
    owners: dict[tuple[int, int], int],
    low: float,
    high: float,
    log_y: bool,
) -> list[Text]:
    height = len(cells)
    labels = {height - 1: _number(low, log_y), 0: _number(high, log_y)}
    if height >= 5:
        labels[height // 2] = _number(high - (high - low) * (height // 2) / (height - 1), log_y)
    lines = []
    for row_index, row in enumerate(cells):
        line = Text(labels.get(row_index, "").rjust(LABEL_WIDTH) + (" ┤" if row_index in labels else " │"))
        for column_index, bits in enumerate(row):
            mark = marks.get((row_index, column_index))
            glyph = mark if mark is not None else chr(BRAILLE_BASE + bits)
            owner = owners.get((row_index, column_index))
            line.append(glyph, style=SERIES_COLORS[owner] if owner is not None else "")
        lines.append(line)
    return lines


def _x_axis(t_start: int, t_end: int, width: int, unit: str) -> list[Text]:
    left, right = format_time(t_start, unit), format_time(t_end, unit)
    gap = max(width + 2 - len(left) - len(right), 1)
    return [
        Text(" " * LABEL_WIDTH + " └" + "─" * width),
        Text(" " * (LABEL_WIDTH + 2) + left + " " * gap + right),
    ]


def _legend(series: Sequence[Series], log_y: bool, unit: str) -> list[Text]:
    lines = []
    for index, curve in enumerate(series):
        line = Text(" " * (LABEL_WIDTH + 2))
        line.append("━━ ", style=SERIES_COLORS[index])
        line.append(curve.label)
        line.append(f"  {_describe(curve.points, log_y, unit)}", style="dim")
        lines.append(line)
    return lines


def _describe(points: Sequence[tuple[int, float]], log_y: bool, unit: str) -> str:
    """The legend note: the last finite value, when it turns non-finite, what a log plot left out."""
    notes = [f"{len(points)} point{'' if len(points) == 1 else 's'}"]
    finite = [value for _, value in points if math.isfinite(value)]
    if finite:
        notes.append(f"last finite {finite[-1]:.6g}")
    first_bad = next((t_ns for t_ns, value in points if not math.isfinite(value)), None)
    if first_bad is not None:
        notes.append(f"non-finite from {format_time(first_bad, unit)}")
    if log_y:
        hidden = sum(1 for value in finite if value <= 0)
        if hidden:
            notes.append(f"{hidden} values ≤ 0 not shown on the log scale")
    return ", ".join(notes)
