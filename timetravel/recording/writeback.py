"""Starting the OS's writeback of a recording's new bytes early, so the fsync at close waits less.

A recording is fsynced at close (and every SYNC_BYTES_MIN, writer.py): until then its frames sit
in the page cache as dirty pages, and the close's fsync wrote all of them and waited for the disk:
~10-14 ms of the message-level dp_training demo's ~1 s run (20 MB). Linux's ``sync_file_range``
with SYNC_FILE_RANGE_WRITE starts writing a range out and returns without waiting for it, so the
writer calls it at every snapshot (after the frames reach the OS): the disk writes while the run
goes on, and the fsync at close finds most pages already clean (a 20 MB file in ten 2 MB steps:
close fsync 9-11 ms before, 1-5 ms after, 2026-12-02 on this machine's ext4).

It changes nothing that is promised: no byte of the file, and not its durability (the fsyncs stay
where they were; a writeback started is not a writeback waited for). Where the call is missing
(another OS, a libc without it) or fails (a file system that refuses it), nothing happens.
"""

from __future__ import annotations

import ctypes
import functools
import sys
from collections.abc import Callable

SYNC_FILE_RANGE_WRITE = 2
"""linux/fs.h: start writeback of the range's dirty pages, do not wait for it."""


@functools.cache
def _sync_file_range() -> Callable[..., int] | None:
    """libc's sync_file_range, loaded once (None: not Linux, or a libc without it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).sync_file_range
    except (OSError, AttributeError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


def writeback_available() -> bool:
    """Whether :func:`start_writeback` can start anything on this system."""
    return _sync_file_range() is not None


def start_writeback(descriptor: int, offset: int, length: int) -> bool:
    """Ask the OS to start writing ``length`` bytes of the file at ``offset`` to disk, without
    waiting; True if it accepted. The bytes must already be flushed to the OS (``file.flush()``)."""
    function = _sync_file_range()
    if length <= 0 or function is None:
        return False
    return bool(function(descriptor, offset, length, SYNC_FILE_RANGE_WRITE) == 0)
