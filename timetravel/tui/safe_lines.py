"""Every line a TUI widget draws, with the control characters of its text escaped.

Textual writes a widget's text to the terminal as it is: a branch named ``b\\x1b]0;pwned\\x07`` in
a recording retitled the terminal from the branch tree. So every widget that can show text from a
recording or a database draws through :class:`TerminalSafeLines`, which passes each segment of
each line through the one sanitising function (sim/terminal_text.py) and keeps the line's width.
Textual's own widgets are used through the subclasses below.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.segment import Segment
from textual.geometry import Region
from textual.strip import Strip
from textual.widgets import DataTable, RichLog, Static

from timetravel.sim.terminal_text import terminal_safe

if TYPE_CHECKING:
    from textual.widget import Widget

    _Base = Widget
else:
    _Base = object


def safe_strip(strip: Strip) -> Strip:
    """``strip``, or a copy of the same width with its text segments' control characters escaped."""
    segments = list(strip)
    if all(segment.control or segment.text.isprintable() for segment in segments):
        return strip
    escaped = [
        segment if segment.control else Segment(terminal_safe(segment.text), segment.style, None)
        for segment in segments
    ]
    return Strip(escaped).adjust_cell_length(strip.cell_length)


class TerminalSafeLines(_Base):
    """Mixed in first: the widget's lines go through :func:`safe_strip` (see the module docstring)."""

    def render_lines(self, crop: Region) -> list[Strip]:
        return [safe_strip(strip) for strip in super().render_lines(crop)]


class SafeStatic(TerminalSafeLines, Static):
    """A Static whose text may come from a recording."""


class SafeRichLog(TerminalSafeLines, RichLog):
    """The output pane: command results, which quote the recording."""


class SafeDataTable(TerminalSafeLines, DataTable):
    """A table of values from a recording."""
