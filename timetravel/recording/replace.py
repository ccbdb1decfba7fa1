"""Recording over a file that exists: refused unless the user says ``--force``, and never in place.

Recording replaces the whole file, and the branches of a recording live in it, so recording over
an explored recording used to delete its branches without a word (issue 32 item 5). The rule,
for every command that records (``run --record``, ``torchrun --record``, ``fuzz``'s recordings,
``minimize --out``): a path that exists is refused in one line naming what it holds, unless
``force``. With ``force`` the new recording is written beside it as ``NAME.partial``
(files.PARTIAL_SUFFIX) and renamed over it only once complete (``RecordingWriter.close``), so an
interrupted run leaves the old recording whole and the new one readable as a partial recording.
A recording still being written by another process is never replaced, ``force`` or not.
"""

from __future__ import annotations

import os
from pathlib import Path

from timetravel.recording.files import open_regular
from timetravel.recording.format import RecordingError
from timetravel.recording.lock import is_being_written
from timetravel.recording.reader import RecordingReader

BRANCHES_NAMED_MAX = 5
FORCE_OPTION = "--force"


class RecordingExistsError(RecordingError):
    """The output path of a recording exists and the command line did not say ``--force``."""


def check_replaceable(path: str | Path, *, force: bool = False) -> None:
    """Refuse to record over ``path`` when it exists (unless ``force``) or when another process is
    writing it (always); a missing path is fine. Called before any work starts, and again by the
    writer when it creates the file (``RecordingWriter.create``)."""
    target = Path(path)
    if not os.path.lexists(target):
        return
    if in_progress(target):
        raise RecordingError(f"{target}: another process is writing this recording (it is in progress)")
    if not force:
        raise RecordingExistsError(
            f"{target} exists{_what_it_holds(target)}: record to another path, or pass {FORCE_OPTION} to "
            "replace it"
        )


def in_progress(target: Path) -> bool:
    """True when a live writer holds ``target``'s lock (recording/lock.py)."""
    try:
        with open_regular(target) as file:
            return is_being_written(file)
    except OSError:
        return False


def _what_it_holds(target: Path) -> str:
    """`` (a recording with 2 branches: b1, b2)``, `` (a recording)``, or nothing for another file."""
    try:
        with RecordingReader.open(target) as reader:
            branches = list(reader.catalog.branches)
    except (RecordingError, OSError):
        return ""
    if not branches:
        return " (a recording)"
    shown = ", ".join(branches[:BRANCHES_NAMED_MAX]) + (", ..." if len(branches) > BRANCHES_NAMED_MAX else "")
    plural = "es" if len(branches) != 1 else ""
    return f" (a recording with {len(branches)} branch{plural} that replacing it would delete: {shown})"
