"""A progress line on stderr for long commands, drawn only when stderr is a terminal.

Scripts and pipes see nothing (their output stays clean, ``--json`` stays parseable); a person at a
terminal sees one line rewritten in place — a bar, a count and what the command is doing — that is
erased when the command finishes.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

BAR_WIDTH = 24
REDRAW_SECONDS_MIN = 0.1
"""Redraw at most this often: a terminal is slow, and a search reports thousands of times."""
LINE_CHARS_MAX = 100


class ProgressLine:
    """``update(done, total, text)`` while working, ``close()`` at the end (or use ``with``)."""

    def __init__(self, stream: TextIO | None = None, *, enabled: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._drawn = 0
        self._last = 0.0

    def update(self, done: int, total: int | None, text: str = "") -> None:
        """Draw ``done/total`` as a bar, ``[done]`` without a total, or ``text`` alone when done < 0."""
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < REDRAW_SECONDS_MIN:
            return
        self._last = now
        if total:
            filled = min(BAR_WIDTH, BAR_WIDTH * done // max(total, 1))
            line = f"[{'#' * filled}{'-' * (BAR_WIDTH - filled)}] {done}/{total} {text}"
        else:
            line = f"[{done}] {text}" if done >= 0 else text
        line = line[:LINE_CHARS_MAX]
        self.stream.write("\r" + line.ljust(self._drawn))
        self.stream.flush()
        self._drawn = len(line)

    def close(self) -> None:
        if self.enabled and self._drawn:
            self.stream.write("\r" + " " * self._drawn + "\r")
            self.stream.flush()
            self._drawn = 0

    def __enter__(self) -> ProgressLine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
