"""The rank side's process plumbing: who dies with whom, and who adopts orphans (Linux prctl).

Used by the zygote, every rank and every rank checkpoint; imports nothing of timetravel.
"""

from __future__ import annotations

import signal

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> None:
    """Orphans below this process (rank checkpoints, after their double fork) become its children."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def die_with_parent() -> None:
    """Ask the kernel to SIGKILL this process when its parent dies: nothing is ever orphaned."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: the coordinator still kills ranks at the end
        pass
