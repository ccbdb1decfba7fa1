"""A one-line progress bar on a terminal: seeds done, seeds/s, failures so far, ETA.

Drawn on stderr (stdout stays clean for ``--json``), at most ``REDRAWS_PER_S`` times a second,
and only when stderr is a terminal: a log file gets the final summary, not a thousand ``\\r``.
"""

from __future__ import annotations

import shutil
import sys
import time
from typing import TextIO

REDRAWS_PER_S = 8
BAR_CHARS_MAX = 40
BAR_CHARS_MIN = 10


def format_duration(seconds: float) -> str:
    seconds = max(0, round(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    if minutes:
        return f"{minutes}m{seconds:02d}s"
    return f"{seconds}s"


class ProgressBar:
    """``update(done, failures)`` as rows come in; ``finish()`` leaves the last line in place."""

    def __init__(self, total: int, label: str, stream: TextIO | None = None) -> None:
        self.total = total
        self.label = label
        self.stream = stream or sys.stderr
        self.started = time.monotonic()
        self.drawn_at = 0.0
        self.done = 0
        self.failures = 0

    @classmethod
    def for_terminal(cls, total: int, label: str) -> ProgressBar | None:
        """A bar when stderr is a terminal, else None."""
        return cls(total, label) if sys.stderr.isatty() else None

    def update(self, done: int, failures: int) -> None:
        self.done, self.failures = done, failures
        now = time.monotonic()
        if now - self.drawn_at >= 1 / REDRAWS_PER_S:
            self.drawn_at = now
            self._draw(now)

    def line(self, now: float | None = None, columns: int | None = None) -> str:
        """The bar's text: the bar itself takes what room the terminal leaves (within bounds)."""
        elapsed = max(1e-9, (now or time.monotonic()) - self.started)
        rate = self.done / elapsed
        remaining = self.total - self.done
        eta = format_duration(remaining / rate) if rate > 0 else "?"
        counts = (
            f"{self.done:,}/{self.total:,} seeds  {rate:,.1f} seeds/s  {self.failures:,} failing  ETA {eta}"
        )
        columns = columns or shutil.get_terminal_size().columns
        width = min(BAR_CHARS_MAX, max(BAR_CHARS_MIN, columns - len(self.label) - len(counts) - 5))
        filled = width * self.done // self.total if self.total else width
        return f"{self.label} [{'#' * filled}{'.' * (width - filled)}] {counts}"

    def _draw(self, now: float) -> None:
        self.stream.write("\r\x1b[2K" + self.line(now))
        self.stream.flush()

    def finish(self) -> None:
        self._draw(time.monotonic())
        self.stream.write("\n")
        self.stream.flush()
