"""Who is writing a recording: an ``flock`` that the writer holds on the file while it is open.

A recording without its END frame is either *in progress* (a recorder is still appending to it) or
*incomplete* (the recorder died: a crash, a kill, a full disk). The two must never be told apart by
guessing from the bytes — a torn tail looks the same in both. So the writer takes an exclusive
``flock`` on the file when it opens it and keeps it until it closes; the kernel drops the lock when
the process dies, however it dies, so no stale lock can make a crashed file look alive, and there
is no lock file to clean up. A reader asks with a non-blocking shared lock that it drops at once:
refused means a live writer holds the file.

``flock`` locks belong to an open file description, so the probe also sees a writer in the same
process (a TUI that writes a branch, a test). On a platform without ``fcntl``, or a file system
without ``flock``, no file is ever in progress (the old behaviour: "incomplete").
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO

from timetravel.recording.format import RecordingError

try:
    import fcntl
except ImportError:  # pragma: no cover - not on Linux or macOS
    fcntl = None  # type: ignore[assignment]

LOCK_ATTEMPTS = 50
LOCK_RETRY_S = 0.002
"""A reader's probe holds a shared lock for microseconds; the writer retries through it (100 ms in
all) before it concludes that another writer holds the file."""


def hold_writer_lock(file: IO[bytes], path: Path) -> None:
    """Take the writer's exclusive lock on ``file`` (kept until the file is closed), or raise a
    RecordingError when another live writer holds it."""
    if fcntl is None:
        return
    for _attempt in range(LOCK_ATTEMPTS):
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            time.sleep(LOCK_RETRY_S)
        except OSError:
            return  # a file system without flock (some network mounts): no file is in progress
    raise RecordingError(f"{path}: another process is writing this recording (it is in progress)")


def is_being_written(file: IO[bytes]) -> bool:
    """True when a live writer holds ``file``'s lock (see the module docstring)."""
    if fcntl is None:
        return False
    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    except OSError:
        return False
    fcntl.flock(file.fileno(), fcntl.LOCK_UN)
    return False
