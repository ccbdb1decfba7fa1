"""Sections a Ctrl-C must not cut in the middle, and the exceptions Ctrl-C and SIGTERM raise.

Python raises ``KeyboardInterrupt`` wherever the main thread is when the signal comes — also between
a lock's acquisition and the ``with`` block that would release it (``threading.Condition.__enter__``
returning into ``queue.put``). Once in a soak of 50 Ctrl-Cs of ``torchrun --record``, the recorder's
write queue was left locked that way, and the next ``put`` (the one that ends the writer thread)
waited for ever. Code that takes such a lock on the main thread runs it inside :class:`Uninterrupted`:
the command line's handler (cli/interrupts.py) then only notes a signal, and the section raises it as
it ends, where no lock is held. Keep such sections short (a queue operation with a timeout, in a loop:
recording/write_thread.py), so that a Ctrl-C still stops the command at once. Outside the command line
Python's own handler raises at once, sections or not.
"""

from __future__ import annotations

import signal
import threading
from types import TracebackType


class Terminated(KeyboardInterrupt):
    """SIGTERM (``kill``, a batch scheduler's time limit): stops a command as Ctrl-C does."""


def interruption(signal_number: int) -> KeyboardInterrupt:
    """The exception ``signal_number`` (SIGINT or SIGTERM) raises."""
    return Terminated() if signal_number == signal.SIGTERM else KeyboardInterrupt()


_depth = [0]
"""Sections the main thread is inside."""
_pending: list[int] = []
"""The first signal noted inside a section (at most one entry)."""


def deferring() -> bool:
    """Whether the main thread is inside a section now (the command line's handler asks)."""
    return _depth[0] > 0


def note(signal_number: int) -> None:
    """Keep ``signal_number`` for the end of the current section."""
    if not _pending:
        _pending.append(signal_number)


class Uninterrupted:
    """A section on the main thread that a Ctrl-C or SIGTERM never cuts; a no-op on other threads."""

    def __enter__(self) -> None:
        self._counted = threading.current_thread() is threading.main_thread()
        if self._counted:
            _depth[0] += 1

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if not self._counted:
            return
        _depth[0] -= 1
        if _depth[0] == 0 and _pending:
            raise interruption(_pending.pop()) from error  # a Ctrl-C wins over what the section raised
