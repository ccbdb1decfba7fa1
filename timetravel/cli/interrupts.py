"""Ctrl-C and SIGTERM stop a command at any moment: exit code 130 (SIGINT) or 143 (SIGTERM), never 0.

While the command runs, either signal raises ``KeyboardInterrupt`` on the main thread (SIGTERM as its
subclass ``Terminated``; inside a section that holds a lock, as that section ends: sim/interruptions.py),
and the command unwinds as it does on Ctrl-C: a recording keeps every
frame written and stays readable, the processes the run started end, ``main`` returns 130 or 143.

Once the command has returned, the process still tears down: exit hooks end the torch zygote (and,
through it, every process below it) and remove the ranks' working directories. Python prints and
ignores an exception raised in an exit hook, so a Ctrl-C that came then was lost and the process
exited 0 — 3 of 35 Ctrl-Cs of ``torchrun --record`` (issue 32). So after the command a signal is only
noted; the teardown finishes, and the last exit hook ends the process with 128 + the signal.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
from types import FrameType, ModuleType

HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)
SECTIONS_MODULE = "timetravel.sim.interruptions"
"""Where sections and ``Terminated`` live: imported by the code that has sections (the recorder, the
shell), not here, so that ``timetravel --help`` imports no numpy (tests/test_cli_startup.py)."""


def _sections(load: bool = False) -> ModuleType | None:
    """sim/interruptions.py if some code imported it (else no section can be open), or ``load``ed."""
    module = sys.modules.get(SECTIONS_MODULE)
    if module is None and load:
        import importlib

        module = importlib.import_module(SECTIONS_MODULE)
    return module


def stopped(stop: KeyboardInterrupt) -> int:
    """Say on stderr that the command was stopped by ``stop``; its exit code (130 or 143)."""
    sections = _sections()
    terminated = sections is not None and isinstance(stop, sections.Terminated)
    number = signal.SIGTERM if terminated else signal.SIGINT
    print(f"timetravel: {describe(number)}", file=sys.stderr)
    return 128 + number


class CommandSignals:
    """The process's SIGINT and SIGTERM handlers for one command; see the module docstring."""

    def __init__(self) -> None:
        self.ending = False
        """The command returned: a signal now is noted, not raised."""
        self.late: int | None = None
        """The first signal that came after the command returned."""

    def install(self) -> None:
        """Install the handlers, and the exit hook that runs last (exit hooks run newest first, and
        this one is registered before any command module registers its own)."""
        for number in HANDLED_SIGNALS:
            signal.signal(number, self._received)
        atexit.register(self._exit_if_stopped_late)

    def _received(self, number: int, frame: FrameType | None) -> None:
        if self.ending:
            if self.late is None:
                self.late = number
            return
        sections = _sections()
        if sections is not None and sections.deferring():  # the main thread holds a lock an
            sections.note(number)  # exception here would leak (sim/interruptions.py)
            return
        if number == signal.SIGINT:
            raise KeyboardInterrupt
        sections = _sections(load=True)
        assert sections is not None
        raise sections.Terminated

    def _exit_if_stopped_late(self) -> None:
        if self.late is None:
            return
        print(f"timetravel: {describe(self.late)}", file=sys.stderr)
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        os._exit(128 + self.late)


def describe(number: int) -> str:
    return "terminated" if number == signal.SIGTERM else "interrupted"
