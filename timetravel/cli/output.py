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


BYTE_SUFFIXES = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "kib": 2**10, "mib": 2**20, "gib": 2**30}
RECORD_BYTES_MIN = 1 << 20
"""The smallest --max-record-bytes: a recording's header, first snapshot and events need some room."""


def byte_count(text: str) -> int:
    """``--max-record-bytes``'s value: bytes, or with a suffix (k, M, G: 1000s; KiB, MiB, GiB: 1024s)."""
    stripped = text.strip().replace("_", "")
    digits = stripped.rstrip("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    suffix = stripped[len(digits) :].lower()
    if suffix not in BYTE_SUFFIXES:
        suffix = suffix.removesuffix("b")
    if not digits.isdigit() or suffix not in BYTE_SUFFIXES:
        raise argparse.ArgumentTypeError(f"not a size in bytes: {text!r} (write 500M, 2G or 1500000000)")
    count = int(digits) * BYTE_SUFFIXES[suffix]
    if not RECORD_BYTES_MIN <= count <= 2**62:
        raise argparse.ArgumentTypeError(f"must be at least {RECORD_BYTES_MIN} bytes (1 MiB), got {count}")
    return count


def add_record_budget_argument(parser: argparse.ArgumentParser) -> None:
    """``--max-record-bytes`` on a command that records (``args.max_record_bytes``)."""
    parser.add_argument(
        "--max-record-bytes",
        type=byte_count,
        metavar="SIZE",
        help="with --record: keep the recording within SIZE bytes (500M, 2G), dropping training states "
        "it kept of the past as it grows (a torch run's; its events and last state stay)",
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
