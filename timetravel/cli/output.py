"""What the commands share about output: ``--force`` (the one definition of the option every
command that records takes) and printing text that comes from a recording or a database.

A command that records refuses an output path that exists (its branches would be lost: issue 32
item 5); ``--force`` records over it, through ``PATH.partial`` renamed over it once complete
(recording/replace.py). Text from a recording or a database reaches the terminal through
:func:`say` and :func:`warn`, which escape its control characters (sim/terminal_text.py).
Imports nothing of the simulator at its top (start-up: see ``timetravel.cli``).
"""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

FORCE_HELP = (
    "record over a file that exists at the output path (its branches are lost): the new recording is "
    "written to PATH.partial and renamed over it only once complete. Without --force, an existing file "
    "is refused"
)


def add_force_argument(parser: argparse.ArgumentParser) -> None:
    """``--force`` on a command that records (stored as ``args.force``)."""
    parser.add_argument("--force", action="store_true", help=FORCE_HELP)


def say(*lines: str, file: TextIO | None = None) -> None:
    """Print each of ``lines`` (which may hold text from a recording or a database) on a line of
    its own, with its control characters escaped (a newline inside one too)."""
    from timetravel.sim.terminal_text import terminal_safe

    for line in lines:
        print(terminal_safe(line), file=file if file is not None else sys.stdout)


def warn(path: str, line: str) -> None:
    """``timetravel: warning: PATH: LINE`` on stderr (what a damaged recording lacks)."""
    say(f"timetravel: warning: {path}: {line}", file=sys.stderr)
