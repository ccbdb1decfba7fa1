"""The rank side's process plumbing: who dies with whom, who adopts orphans, and who leads a session.

Used by the zygote, every rank and every rank checkpoint. Everything a rank starts stays in the
rank's session, which the coordinator ends with the rank (world/driver.py); the zygote, a child
subreaper, adopts what leaves it and ends every descendant when it ends itself (:func:`end_descendants`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from timetravel.torch.protocol.processes import process_table

real_pid = os.getpid
"""This process's real pid (the rank environment makes ``os.getpid`` logical: env/identity.py)."""
real_parent_pid = os.getppid
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
END_ROUNDS_MAX = 200
"""Rounds of :func:`end_descendants` (each kills what it finds, then looks again): a process that
forks faster than it is killed is still bounded."""
END_ROUND_PAUSE_S = 0.005
"""Wall time between two rounds, for the kernel to reparent the orphans of what was just killed."""


def become_subreaper() -> None:
    """Orphans below this process (rank checkpoints, after their double fork) become its children."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def die_with_parent(signal_number: int = signal.SIGKILL) -> None:
    """Ask the kernel to send this process ``signal_number`` when its parent dies: nothing is ever
    orphaned (the zygote asks for SIGTERM, to end its descendants first)."""
    _prctl(_PR_SET_PDEATHSIG, signal_number)


def _prctl(option: int, value: int) -> None:
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the coordinator still kills ranks at the end
        pass


def limit_memory(data_bytes: int | None) -> None:
    """Cap this process's data segment (heap and anonymous mappings: ``RLIMIT_DATA``) at ``data_bytes``
    (None: no cap). An allocation past it fails, as a ``MemoryError`` or torch's allocator error
    (world/memory.py says why)."""
    if data_bytes is None:
        return
    import resource

    resource.setrlimit(resource.RLIMIT_DATA, (data_bytes, data_bytes))


def lead_own_session() -> None:
    """Make this process (a rank, a checkpoint, a resumed rank) the leader of a new session: what it
    starts stays in the session (ended with it), and the terminal's Ctrl-C never reaches it."""
    with contextlib.suppress(OSError):  # already a leader (never, after a fork)
        os.setsid()


def end_descendants() -> int:
    """SIGKILL every descendant of this process until none is left; the number ended.

    This process must be a child subreaper (:func:`become_subreaper`): the orphans of what it
    kills become its children, so the next round finds them."""
    me = real_pid()
    ended: set[int] = set()
    for _ in range(END_ROUNDS_MAX):
        victims = _descendants(me)
        if not victims:
            break
        for pid in victims:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        ended.update(victims)
        time.sleep(END_ROUND_PAUSE_S)
    return len(ended)


def _descendants(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for row in process_table():
        if not row.gone:
            children.setdefault(row.ppid, []).append(row.pid)
    found, frontier = [], [root]
    while frontier:
        below = children.get(frontier.pop(), [])
        found.extend(below)
        frontier.extend(below)
    return found
