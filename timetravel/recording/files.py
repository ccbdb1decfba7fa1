"""Paths a user names: inputs that must be regular files (sim/regular_files.py), output paths and
their folders, and the ``.partial`` file a recording that replaces another is written to.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from pathlib import Path
from typing import IO

from timetravel.sim.regular_files import NotRegularFileError, describe_kind, open_regular

__all__ = [
    "NotRegularFileError",
    "check_output_path",
    "describe_kind",
    "is_same_file",
    "make_parent_folders",
    "open_regular",
    "partial_path",
    "rename_over",
]


def check_output_path(path: str | Path) -> None:
    """Refuse an output path that exists and is not a regular file (a FIFO would block the
    writer, a directory cannot be written), or whose nearest existing folder is a file; a missing
    path is fine, and so are missing folders on the way to it (the writer creates them:
    :func:`make_parent_folders`)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise NotRegularFileError(f"{path}: a parent of it is a file, not a folder") from None
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(f"{path}: {describe_kind(mode)}, not a regular file")


def is_same_file(path: str | Path, other: str | Path) -> bool:
    """True when both paths exist and name one file (through links too)."""
    try:
        return os.path.samefile(path, other)
    except OSError:
        return False


def make_parent_folders(path: str | Path) -> None:
    """Create the missing folders on the way to an output file: the one rule for every file
    timetravel writes (recordings, findings databases, traces, repro tests; docs/cli.md)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)


PARTIAL_SUFFIX = ".partial"
"""A recording that replaces another (``--force``) is written beside it as ``NAME.partial`` and
renamed over it only when complete: an interrupted run leaves the old file whole and the new one
readable as a partial recording (docs/recording-format.md)."""
RELEASE_BYTES_MIN = 1024 * 1024
"""An old file of at least this size that a complete recording replaces is freed by a short
thread (:func:`rename_over`); a smaller one is cheap to free."""


def partial_path(target: str | Path) -> Path:
    """Where a recording that replaces ``target`` is written until it is complete."""
    target = Path(target)
    return target.with_name(target.name + PARTIAL_SUFFIX)


def rename_over(partial: Path, target: Path) -> None:
    """Rename the complete file ``partial`` over ``target``.

    Freeing the blocks of a recording of 20 MB took 6-8 ms on this machine's ext4, inside the run
    when the kernel frees them in the rename. So an old file of RELEASE_BYTES_MIN or more is held
    open across the rename and closed by a short thread (the close releases the GIL); a reader that
    still has it open reads the old recording to its end."""
    old: IO[bytes] | None = None
    with contextlib.suppress(OSError):
        if os.lstat(target).st_size >= RELEASE_BYTES_MIN:
            old = open_regular(target)
    try:
        os.replace(partial, target)
    except BaseException:
        if old is not None:
            old.close()
        raise
    if old is not None:
        threading.Thread(target=old.close, name=f"timetravel release {target.name}", daemon=True).start()
