"""Opening paths a user names, refusing what is not a regular file before it can hang or flood us.

A FIFO blocks in ``open()`` until someone writes to it, /dev/zero reads forever and /dev/urandom
never ends: a path that is not a regular file is refused at once. The check is made on the open
file descriptor (opened non-blocking, so opening a FIFO does not wait), not on a ``stat`` of the
name before opening, so a file swapped in between cannot slip past it. Here in sim/ because a
setting's ``@FILE`` (sim/scenario.py) is read the same way as a recording.
"""

from __future__ import annotations

import os
import stat
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


def read_regular(path: str | Path, bytes_max: int) -> bytes:
    """The bytes of the regular file ``path``, refused (ValueError) past ``bytes_max``: at most
    ``bytes_max + 1`` bytes are ever read, whatever the file says its size is."""
    with open_regular(path) as file:
        data = file.read(bytes_max + 1)
    if len(data) > bytes_max:
        raise ValueError(f"{path} is larger than {bytes_max:,} bytes")
    return data


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
