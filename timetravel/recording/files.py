"""Opening paths a user names, refusing what is not a regular file before it can hang or flood us.

A FIFO blocks in ``open()`` until someone writes to it, /dev/zero reads forever and /dev/urandom
never ends: a path that is not a regular file is refused at once. The check is made on the open
file descriptor (opened non-blocking, so opening a FIFO does not wait), not on a ``stat`` of the
name before opening, so a file swapped in between cannot slip past it.
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO


class NotRegularFileError(OSError):
    """A path that names a FIFO, a device, a socket or a directory where a file was expected."""


def open_regular(path: str | Path) -> IO[bytes]:
    """``path`` opened for binary reading, when it is a regular file (else NotRegularFileError;
    FileNotFoundError and PermissionError as ``open`` raises them)."""
    descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(descriptor).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(f"{path}: {describe_kind(mode)}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def check_output_path(path: str | Path) -> None:
    """Refuse an output path that exists and is not a regular file (a FIFO would block the
    writer, a directory cannot be written); a missing path is fine (it will be created)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise NotRegularFileError(f"{path}: a parent of it is a file, not a folder") from None
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(f"{path}: {describe_kind(mode)}, not a regular file")


def describe_kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


REPLACE_BYTES_MIN = 1024 * 1024
"""An existing file of at least this size is replaced by a new one rather than truncated in place
(:func:`replace_with_new_file`); a smaller one is cheap to truncate."""


def replace_with_new_file(old: IO[bytes], target: Path, lock: Callable[[IO[bytes], Path], None]) -> IO[bytes]:
    """A new, empty file at ``target`` in place of ``old`` (``target``'s open, locked file), or
    ``old`` itself when it cannot be replaced; the caller then empties what it gets.

    Truncating a recording of 20 MB in place frees its pages and blocks there and then: 6-8 ms on
    this machine's ext4, inside a run that records over its previous recording (the bench's
    ``record_overhead_ratio``, ``make demo``). A new file renamed over ``target`` takes microseconds;
    the old one is freed when its last descriptor closes, which a short thread does (the close
    releases the GIL), and a reader that still has it open reads the old recording to its end
    instead of a cut one. The new file is created beside the target, locked with ``lock`` and then
    renamed over it, so the path always names a file whose writer holds its lock. A symlink or a
    file with other hard links is truncated in place, as a user linking it expects."""
    try:
        status = os.lstat(target)
        if (
            not stat.S_ISREG(status.st_mode)
            or status.st_nlink != 1
            or status.st_ino != os.fstat(old.fileno()).st_ino
        ):
            return old
        temporary = target.with_name(f".{target.name}.{os.getpid()}.new")
        descriptor = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError:
        return old
    new = os.fdopen(descriptor, "r+b")
    try:
        lock(new, target)
        os.replace(temporary, target)
    except BaseException:
        new.close()
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        return old
    threading.Thread(target=old.close, name=f"timetravel release {target.name}", daemon=True).start()
    return new
