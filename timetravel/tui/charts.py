"""Curves drawn with text: bucket points into screen columns, then draw them as block characters.

A curve on screen has one value per column. ``column_values`` reduces the ``(t_ns, value)``
points that fall into each column's time range (mean for a loss, max for a failure rate), keeping
a non-finite value visible: a NaN anywhere in a column makes that column NaN, because a NaN that
averages away is exactly the bug a user is hunting. Drawing is separate (``sparkline_glyphs``,
``plot_rows``) so every widget shares one mapping from values to glyphs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence

import numpy as np

SPARK_GLYPHS = "▁▂▃▄▅▆▇█"
NONFINITE_GLYPH = "!"
EMPTY_GLYPH = " "
POINTS_MAX = 1_000_000
"""Bound on the points a curve may hold (a run of a million steps is already a lot)."""

Column = float | None
"""A column's value: None when no point falls in it, NaN/inf when one of its points is."""


def curve_array(points: Sequence[tuple[int, float]] | np.ndarray) -> np.ndarray:
    """Points as an (n, 2) float64 array (a caller that draws a curve often converts once)."""
    if len(points) > POINTS_MAX:
        raise ValueError(f"a curve holds at most {POINTS_MAX} points")
    return np.asarray(points, dtype=np.float64).reshape(-1, 2)


def column_values(
    points: Sequence[tuple[int, float]] | np.ndarray,
    t_start_ns: int,
    t_end_ns: int,
    columns: int,
    *,
    reduce: str = "mean",
) -> list[Column]:
    """One value per column for the points in ``[t_start_ns, t_end_ns]`` (mean or max)."""
    if columns <= 0:
        return []
    data = curve_array(points)
    if not len(data):
        return [None] * columns
    times, values = data[:, 0], data[:, 1]
    inside = (times >= t_start_ns) & (times <= t_end_ns)
    times, values = times[inside], values[inside]
    span = max(t_end_ns - t_start_ns, 1)
    index = np.minimum(((times - t_start_ns) * columns // span).astype(np.int64), columns - 1)
    finite = np.isfinite(values)
    counts = np.bincount(index, minlength=columns)
    bad = np.bincount(index, weights=~finite, minlength=columns)
    safe = np.where(finite, values, 0.0)
    if reduce == "max":
        reduced = np.full(columns, -np.inf)
        np.maximum.at(reduced, index, safe)
    elif reduce == "mean":
        reduced = np.bincount(index, weights=safe, minlength=columns) / np.maximum(counts, 1)
    else:
        raise ValueError(f"reduce must be mean or max, got {reduce!r}")
    result: list[Column] = []
    for column in range(columns):
        if counts[column] == 0:
            result.append(None)
        elif bad[column]:
            result.append(math.nan)
        else:
            result.append(float(reduced[column]))
    return result


def hold_gaps(values: Sequence[Column]) -> list[Column]:
    """Carry each value forward over empty columns up to the next point (a step curve).

    A metric sampled once per training step leaves empty columns when zoomed in; holding the
    last value keeps the curve readable. Columns before the first point stay empty.
    """
    held: list[Column] = []
    last: Column = None
    last_index = max((index for index, value in enumerate(values) if value is not None), default=-1)
    for index, value in enumerate(values):
        if value is not None:
            last = value
        held.append(value if value is not None or index > last_index else last)
    return held


def value_range(values: Sequence[Column]) -> tuple[float, float]:
    """The finite minimum and maximum of the columns (0, 0 when there is none)."""
    finite = [value for value in values if value is not None and math.isfinite(value)]
    if not finite:
        return 0.0, 0.0
    return min(finite), max(finite)


def level(value: float, low: float, high: float, levels: int) -> int:
    """Which of ``levels`` steps ``value`` falls on between ``low`` and ``high``."""
    if high <= low:
        return levels // 2
    fraction = (value - low) / (high - low)
    return max(0, min(levels - 1, int(fraction * (levels - 1) + 0.5)))


def sparkline_glyphs(values: Sequence[Column], low: float | None = None, high: float | None = None) -> str:
    """One block glyph per column; blank where empty and ``!`` where non-finite."""
    auto_low, auto_high = value_range(values)
    low = auto_low if low is None else low
    high = auto_high if high is None else high
    glyphs = []
    for value in values:
        if value is None:
            glyphs.append(EMPTY_GLYPH)
        elif not math.isfinite(value):
            glyphs.append(NONFINITE_GLYPH)
        else:
            glyphs.append(SPARK_GLYPHS[level(value, low, high, len(SPARK_GLYPHS))])
    return "".join(glyphs)


def array_sparkline(array: np.ndarray, width: int) -> str:
    """A sparkline of a numeric array, sampled down to ``width`` buckets (mean per bucket)."""
    flat = np.asarray(array).reshape(-1)
    if flat.size == 0 or width <= 0:
        return ""
    flat = flat.astype(np.float64, copy=False)
    buckets = min(width, flat.size)
    edges = np.linspace(0, flat.size, buckets + 1).astype(np.int64)
    values: list[Column] = []
    for start, stop in itertools.pairwise(edges):
        chunk = flat[start:stop]
        values.append(float(chunk.mean()) if np.isfinite(chunk).all() else math.nan)
    return sparkline_glyphs(values)


def plot_rows(series: Sequence[Sequence[Column]], height: int) -> list[list[int]]:
    """A height x columns grid: which series (bit i for series i) has its point in each cell.

    Row 0 is the top. All series share one scale, so two loss curves compare by eye; a
    non-finite value is drawn in row 0 (the top), where a blow-up belongs.
    """
    columns = max((len(values) for values in series), default=0)
    grid = [[0] * columns for _ in range(height)]
    if height <= 0:
        return grid
    low, high = value_range([value for values in series for value in values])
    for bit, values in enumerate(series):
        for column, value in enumerate(values):
            if value is None:
                continue
            row = 0 if not math.isfinite(value) else height - 1 - level(value, low, high, height)
            grid[row][column] |= 1 << bit
    return grid


def nice_step(t_ns: float) -> int:
    """The smallest 1, 2 or 5 times a power of ten nanoseconds that is at least ``t_ns``."""
    if t_ns <= 1:
        return 1
    power = 10 ** math.floor(math.log10(t_ns))
    for factor in (1, 2, 5, 10):
        if factor * power >= t_ns:
            return int(factor * power)
    return int(10 * power)  # pragma: no cover - the loop always returns
