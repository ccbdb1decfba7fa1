"""The rank's process id: a logical pid, the same in every run, instead of the host's.

``install_identity(rank, restarts)``: inside the rank process, ``os.getpid()`` is
``LOGICAL_PID_FIRST + 1 + restarts * NPROC_MAX + rank`` and ``os.getppid()`` is ``LOGICAL_PID_FIRST``
(the launcher's, as torchrun's agent is every local rank's parent), so a script that names a file,
logs or seeds with its pid does the same in every run. Both are above any pid the kernel hands out
(``PID_MAX_LIMIT``, 2**22), so they never name another real process. The rank itself stays addressable:

* ``os.kill(getpid(), sig)`` signals the rank (the logical pid is translated);
* a process the rank forks (a DataLoader worker, the script's ``os.fork()``) sees its own real pid,
  and its ``os.getppid()`` is the rank's logical pid, so fork detection (``multiprocessing``,
  ``tempfile``, ``logging``) works;
* ``psutil.Process()`` and ``psutil.Process(os.getpid())`` describe the rank's real process;
* a checkpoint resumed as the rank (rank/checkpoint.py) becomes it again: :func:`adopt_this_process`.

Not translated: ``/proc/<os.getpid()>/…`` paths (``/proc/self`` works), other calls taking a pid.
"""

from __future__ import annotations

import os
from typing import Any

from timetravel.torch.protocol.limits import NPROC_MAX
from timetravel.torch.rank.env.patching import Installation, Patches, when_imported
from timetravel.torch.rank.process import real_parent_pid, real_pid

LOGICAL_PID_FIRST = 1 << 22
"""The launcher's logical pid; ranks follow it. Linux never hands out a pid this large."""

_real_getpid = real_pid
_real_getppid = real_parent_pid
_rank_process: list[int] = []
"""The real pid of the process that is the rank (at most one entry while installed)."""


def logical_pid(rank: int, restarts: int) -> int:
    """The pid rank ``rank`` of incarnation ``restarts`` reads (a restart gives new pids, as torchrun's)."""
    return LOGICAL_PID_FIRST + 1 + restarts * NPROC_MAX + rank


def adopt_this_process() -> None:
    """This process is the rank from now on (a rank resumed from a checkpoint, rank/checkpoint.py)."""
    if _rank_process:
        _rank_process[0] = _real_getpid()


def install_identity(rank: int, restarts: int) -> Installation:
    """Serve ``os.getpid``/``os.getppid`` logically in this process; see the module docstring."""
    logical = logical_pid(rank, restarts)
    patches = Patches()
    _rank_process[:] = [_real_getpid()]
    patches.on_undo(_rank_process.clear)

    def getpid() -> int:
        real = _real_getpid()
        return logical if _rank_process and real == _rank_process[0] else real

    def getppid() -> int:
        if _rank_process and _real_getpid() == _rank_process[0]:
            return LOGICAL_PID_FIRST
        real = _real_getppid()
        return logical if _rank_process and real == _rank_process[0] else real

    def real_pid(pid: int) -> int:
        return _rank_process[0] if _rank_process and pid == logical else pid

    real_kill = os.kill

    def kill(pid: int, signal_number: int) -> None:
        real_kill(real_pid(pid), signal_number)

    patches.replace(os, "getpid", getpid)
    patches.replace(os, "getppid", getppid)
    patches.replace(os, "kill", kill)
    when_imported(patches, "psutil", lambda module: _translate_psutil(patches, module, real_pid))
    patches.rebind_aliases(skip_prefixes=("timetravel.",))
    return Installation("identity", patches, logical)


def _translate_psutil(patches: Patches, psutil: Any, real_pid: Any) -> None:
    """``psutil.Process()`` asks ``os.getpid()``: the logical pid, which no process has."""

    def make(original: Any) -> Any:
        def init(self: Any, pid: Any = None, *args: Any, **kwargs: Any) -> Any:
            return original(self, _real_getpid() if pid is None else real_pid(pid), *args, **kwargs)

        return init

    patches.wrap(psutil.Process, "_init", make)
