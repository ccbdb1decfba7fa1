"""The zygote: one process that imported torch once, from which every rank is forked.

Started by the coordinator as ``python -m timetravel.torch.rank.zygote`` (a fresh interpreter: no threads,
no user code, nothing of the coordinator's state), it pays torch's import once per coordinator process
and forks a rank in a few milliseconds per request. Requests and replies are length-prefixed msgpack
on its stdin and stdout. Exit statuses are reaped automatically: how a rank ended is the rank's own
last message, and a rank that vanished without one crashed.

Nothing below it outlives it. It is a child subreaper: every orphan below it — a rank checkpoint,
what a rank started and left behind — becomes its child. It ends when the coordinator closes its
stdin or dies (``PR_SET_PDEATHSIG`` sends it SIGTERM), and then first kills every descendant
(:func:`~timetravel.torch.rank.process.end_descendants`). Its hash secret is fixed: the coordinator
starts it with ``PYTHONHASHSEED`` set (world/driver.py), so every rank iterates sets of strings alike.
"""

from __future__ import annotations

import os
import signal
import sys
import traceback
from typing import Any

from timetravel.torch.protocol.frames import read_frame, write_frame
from timetravel.torch.rank.process import become_subreaper, die_with_parent, end_descendants


def main() -> None:
    parent = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    signal.signal(signal.SIGTERM, lambda number, frame: _end_if_orphaned(parent))
    die_with_parent(signal.SIGTERM)
    become_subreaper()  # rank checkpoints are handed to the zygote (rank_checkpoint.py)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # reap ranks automatically
    if os.getppid() != parent:  # the coordinator died before the request above took
        _end_if_orphaned(parent)
    code = 0
    try:
        _serve()
    except Exception:  # torch could not be imported, a malformed request: the coordinator says so
        traceback.print_exc()
        code = 1
    end_descendants()
    os._exit(code)  # not Python's finalization of torch: the coordinator waits for this exit


def _end_if_orphaned(parent: int) -> None:
    """SIGTERM: when the coordinator is gone, end everything below and exit; otherwise (a SIGTERM
    sent to the coordinator's whole process group) ignore it: the coordinator ends the run."""
    if os.getppid() != parent:
        end_descendants()
        os._exit(0)


def _serve() -> None:
    requests, replies = sys.stdin.buffer, sys.stdout.buffer
    import torch

    torch.set_num_threads(1)
    import timetravel.torch.rank.backend
    import timetravel.torch.rank.setup  # noqa: F401  (imported here so every fork has it)
    from timetravel.torch.rank.env.install import preload

    preload()  # what every rank's install_all needs, imported once; the heap frozen for cheap forks

    write_frame(replies, {"ready": True, "torch": torch.__version__})
    while True:
        request = read_frame(requests)
        if request is None:
            return
        pid = os.fork()
        if pid == 0:
            _become_rank(request)
        write_frame(replies, {"pid": pid})


def _become_rank(spec: dict[str, Any]) -> None:
    try:
        os.dup2(2, 1)  # the rank's C-level stdout goes where the coordinator's stderr goes
        sys.stdin.close()
        from timetravel.torch.rank.main import run_rank

        run_rank(spec)
    finally:
        os._exit(70)


if __name__ == "__main__":
    main()
