"""The braille plot: exact dots for known curves, non-finite marks, log scale, colours, bounds."""

from __future__ import annotations

import math

import pytest

from timetravel.shell.render.plot import BRAILLE_BASE, DOT_BITS, LABEL_WIDTH, SERIES_COLORS, Series, plot

MS = 1_000_000


def cells(line_text: str) -> str:
    """The plot cells of a row (after the y label and the axis character)."""
    return line_text[LABEL_WIDTH + 2 :]


def test_a_rising_line_lights_the_bottom_left_dot_and_the_whole_right_column() -> None:
    # Two dot columns, four dot rows: t=0 (value 0) is column 0, bottom row; t=1ms (value 1) is
    # column 1, top row, joined to the previous column's row by a vertical run of dots.
    lines = plot([Series("a", [(0, 0.0), (MS, 1.0)])], width=1, height=1)
    expected = DOT_BITS[0][3] | DOT_BITS[1][0] | DOT_BITS[1][1] | DOT_BITS[1][2] | DOT_BITS[1][3]
    assert cells(lines[0].plain) == chr(BRAILLE_BASE + expected)
    assert lines[0].plain.startswith(" " * 9 + "1 ┤")
    assert lines[2].plain.strip() == "0ms 1ms"


def test_a_curve_that_turns_nan_is_marked_and_the_legend_says_from_when() -> None:
    # Four dot columns over 0..3ms; the two finite points (value 1.0, range padded to 0.9..1.1)
    # land on dot row round(0.5 * 7) = 4: the top dots of the second cell row, in cell column 0.
    # The NaN points fall in dot columns 2 and 3, cell column 1: a '!' on the top row.
    points = [(0, 1.0), (MS, 1.0), (2 * MS, math.nan), (3 * MS, math.nan)]
    lines = plot([Series("main", points)], width=2, height=2)
    assert cells(lines[0].plain) == chr(BRAILLE_BASE) + "!"
    assert cells(lines[1].plain) == chr(BRAILLE_BASE + (DOT_BITS[0][0] | DOT_BITS[1][0])) + chr(BRAILLE_BASE)
    assert lines[0].plain.strip().startswith("1.1")
    assert lines[1].plain.strip().startswith("0.9")
    legend = lines[-1].plain
    assert "main" in legend
    assert "4 points, last finite 1, non-finite from 2ms" in legend


def test_each_curve_has_its_colour_and_a_legend_line() -> None:
    a = Series("main", [(0, 0.0), (MS, 0.0)])
    b = Series("b1", [(2 * MS, 1.0), (3 * MS, 1.0)])
    lines = plot([a, b], width=2, height=1)
    row = lines[0]
    styles = {str(span.style) for span in row.spans}
    assert styles == {SERIES_COLORS[0], SERIES_COLORS[1]}
    assert [line.plain.split()[1] for line in lines[-2:]] == ["main", "b1"]


def test_the_log_scale_labels_decades_and_counts_what_it_cannot_place() -> None:
    lines = plot([Series("loss", [(0, 100.0), (MS, 1.0), (2 * MS, 0.0)])], width=4, height=2, log_y=True)
    assert lines[0].plain.strip().startswith("100")
    assert lines[1].plain.strip().startswith("1 ")
    assert "1 values ≤ 0 not shown on the log scale" in lines[-1].plain


def test_times_on_the_x_axis_are_exact_in_the_display_unit() -> None:
    lines = plot([Series("a", [(1_500_000, 1.0), (2_250_000, 2.0)])], width=20, height=2, unit="us")
    assert lines[3].plain.split() == ["1500us", "2250us"]


def test_no_points_and_bad_sizes() -> None:
    assert [line.plain for line in plot([Series("a", [])])] == ["(no points to plot)"]
    with pytest.raises(ValueError, match="out of range"):
        plot([Series("a", [(0, 1.0)])], width=0)
    with pytest.raises(ValueError, match="at most"):
        plot([Series(str(i), [(0, 1.0)]) for i in range(len(SERIES_COLORS) + 1)])


def test_points_far_apart_are_joined_so_no_dot_column_between_them_is_empty() -> None:
    lines = plot([Series("a", [(0, 0.0), (7 * MS, 1.0)])], width=4, height=1)
    left = DOT_BITS[0][0] | DOT_BITS[0][1] | DOT_BITS[0][2] | DOT_BITS[0][3]
    right = DOT_BITS[1][0] | DOT_BITS[1][1] | DOT_BITS[1][2] | DOT_BITS[1][3]
    for glyph in cells(lines[0].plain):
        bits = ord(glyph) - BRAILLE_BASE
        assert bits & left and bits & right, glyph
    # Monotone: the first cell holds the bottom-left dot, the last the top-right one.
    assert (ord(cells(lines[0].plain)[0]) - BRAILLE_BASE) & DOT_BITS[0][3]
    assert (ord(cells(lines[0].plain)[-1]) - BRAILLE_BASE) & DOT_BITS[1][0]
