"""Ending a rank with everything it started (coordinator side).

Every rank process leads a session of its own (rank/process.py ``lead_own_session``), and what its
script starts — a ``subprocess.Popen``, a forked worker, their children — stays in that session
unless it asks for a new one. So a rank is ended with its session: the process group first
(``killpg``, which also works where there is no ``/proc``), then every other member of the session
the process table shows, round after round until none is left (a member may fork meanwhile).
Processes that left the session (``start_new_session=True``, a daemon) are ended by the zygote when
it ends (rank/zygote.py).

The members other than the ranks that were still running are named (``r0: sleep``): a run's
summary says so (``processes_killed``), since a script that leaves a process behind would, under
torchrun, leave it running after the job.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time

from timetravel.torch.protocol.processes import ProcessRow, process_table

END_ROUNDS_MAX = 200
"""Rounds of killing and looking again: bounded even for a process that forks as fast as it can."""
END_ROUND_PAUSE_S = 0.002
"""Wall time between two rounds (the kernel delivers SIGKILL asynchronously)."""


def end_sessions(leaders: dict[int, str]) -> list[str]:
    """SIGKILL each leader (pid -> its rank's name, ``r0``) and every process of its session; the
    members that were still running, other than the leaders, as ``r0: sleep`` (sorted)."""
    if not leaders:
        return []
    table = process_table()
    running = [row for row in table if row.sid in leaders and row.pid not in leaders and not row.gone]
    for pid in leaders:
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    members = _kill_members(table, leaders)
    for _ in range(END_ROUNDS_MAX):
        if not members:
            break
        time.sleep(END_ROUND_PAUSE_S)
        members = _kill_members(process_table(), leaders)
    return sorted(f"{leaders[row.sid]}: {row.name}" for row in running)


def _kill_members(table: list[ProcessRow], leaders: dict[int, str]) -> list[int]:
    """SIGKILL the members of the leaders' sessions that are not gone yet; their pids."""
    members = [row.pid for row in table if row.sid in leaders and not row.gone]
    for pid in members:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return members
