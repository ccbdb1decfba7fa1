"""Progress and stop for the command that is running: the command context's two hooks.

The command language hands long work (``branch``, ``fanout``, ``minimize``, ...) two callables
through its ``CommandContext``: ``progress(report)``, called after each unit of work, and
``should_stop()``, polled between units. A :class:`CommandMonitor` is both: it draws the reports
on one rewritten line of a terminal and answers ``should_stop`` from Ctrl-C.

Ctrl-C while a command runs stops **the command, never the shell**:

* a long-running command (its spec says ``long_running``) is asked to stop: the first Ctrl-C
  makes ``should_stop()`` true, and the command ends at its next check with what it has (a
  partial result) — the work is cut cleanly, between units, so a branch being recorded ends
  with a readable file. A second Ctrl-C interrupts at once, for work that stopped checking;
* any other command (a seek, a watch scan) is interrupted at once: it raises
  ``KeyboardInterrupt``, and the engine puts the cursor back where it was before the command.

The handler is installed only while a command runs (the prompt handles Ctrl-C itself while a
line is being typed) and only on the main thread (Python delivers signals there alone).
The wall clock here paces the progress line; it never reaches the simulation.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TextIO

PROGRESS_INTERVAL_S = 0.1
"""At most this often the progress line is redrawn (a report per chunk of events can be many)."""
PROGRESS_CHARS_MAX = 120
STOP_NOTICE = "stopping at the next check… (Ctrl-C again to interrupt at once)"


def progress_text(report: Any) -> str:
    """One line for a progress report of any explore work.

    Reports are duck-typed: the explore engine's ``WorkProgress`` (``task``, ``done``, ``total``,
    ``detail``) and the minimizer's ``Progress`` (``runs``, ``seconds``, ``pass_name``, ...) both
    read well; anything else shows as its ``str``.
    """
    task = getattr(report, "task", None)
    done, total = getattr(report, "done", None), getattr(report, "total", None)
    if isinstance(task, str) and isinstance(done, int) and isinstance(total, int):
        detail = getattr(report, "detail", "")
        amount = f"{min(100, done * 100 // total)}% ({done:,}/{total:,})" if total > 0 else f"{done:,} done"
        return f"{task}: {amount}{', ' + detail if detail else ''}"
    runs, pass_name = getattr(report, "runs", None), getattr(report, "pass_name", None)
    if isinstance(runs, int) and isinstance(pass_name, str):
        seconds = float(getattr(report, "seconds", 0.0))
        faults = getattr(report, "faults", "?")
        choices = getattr(report, "choices_nonzero", "?")
        return (
            f"minimize: {runs:,} runs in {seconds:.1f} s, pass {pass_name}, "
            f"best so far {faults} faults and {choices} nonzero choices"
        )
    return str(report)


class ProgressLine:
    """One line on a terminal, rewritten in place (``\\r`` and erase-to-end), cleared when done."""

    def __init__(
        self,
        stream: TextIO,
        clock: Callable[[], float] = time.monotonic,
        interval_s: float = PROGRESS_INTERVAL_S,
    ) -> None:
        self.stream = stream
        self.clock = clock
        self.interval_s = interval_s
        self.shown_at: float | None = None
        self.visible = False

    def show(self, text: str, force: bool = False) -> None:
        now = self.clock()
        if not force and self.shown_at is not None and now - self.shown_at < self.interval_s:
            return
        self.shown_at = now
        if len(text) > PROGRESS_CHARS_MAX:
            text = text[: PROGRESS_CHARS_MAX - 1] + "…"
        self.stream.write(f"\r{text}\033[K")
        self.stream.flush()
        self.visible = True

    def clear(self) -> None:
        if self.visible:
            self.stream.write("\r\033[K")
            self.stream.flush()
        self.visible = False
        self.shown_at = None


class CommandMonitor:
    """The ``progress``/``should_stop`` hooks of a command context, and Ctrl-C while a command runs.

    ``stream`` is where the progress line goes (None: no line, e.g. stderr is not a terminal);
    the stop flag works either way.
    """

    def __init__(self, stream: TextIO | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self.line = ProgressLine(stream, clock) if stream is not None else None
        self.stop_requested = False
        self.reports = 0
        """Progress reports received during the current command."""
        self._long_running = False

    # -- the hooks the command context calls -------------------------------------------------------

    def progress(self, report: Any) -> None:
        self.reports += 1
        if self.line is not None and not self.stop_requested:
            self.line.show(progress_text(report))

    def should_stop(self) -> bool:
        return self.stop_requested

    # -- around one command --------------------------------------------------------------------------

    @contextmanager
    def running(self, long_running: bool) -> Iterator[None]:
        """While one command runs: Ctrl-C stops it (see the module docstring); the line is cleared after."""
        self.stop_requested = False
        self.reports = 0
        self._long_running = long_running
        installed, previous = _install(self._on_interrupt)
        try:
            yield
        finally:
            if installed:
                signal.signal(signal.SIGINT, previous)
            if self.line is not None:
                self.line.clear()

    def request_stop(self) -> None:
        """What the first Ctrl-C does to a long-running command (also callable from a test or a UI)."""
        self.stop_requested = True
        if self.line is not None:
            self.line.show(STOP_NOTICE, force=True)

    def _on_interrupt(self, signal_number: int, frame: FrameType | None) -> None:
        if self._long_running and not self.stop_requested:
            self.request_stop()
            return
        raise KeyboardInterrupt


SignalHandler = Callable[[int, FrameType | None], Any]


def _install(handler: SignalHandler) -> tuple[bool, Any]:
    """Install ``handler`` for SIGINT: (installed, the handler to put back). Off the main thread
    Python cannot install one, and Ctrl-C cannot reach the command anyway."""
    if threading.current_thread() is not threading.main_thread():
        return False, None
    previous = signal.signal(signal.SIGINT, handler)
    return True, previous if previous is not None else signal.default_int_handler
