"""The zygote: one process that imported torch once, from which every rank is forked.

Started by the coordinator as ``python -m timetravel.torch.rank.zygote`` (a fresh interpreter: no threads,
no user code, nothing of the coordinator's state), it pays torch's import once per coordinator process
and forks a rank in a few milliseconds per request. Requests and replies are length-prefixed msgpack
on its stdin and stdout. It dies with its parent (PR_SET_PDEATHSIG), and its ranks die with it.
Exit statuses are reaped automatically: how a rank ended is the rank's own last message, and a rank
that vanished without one crashed.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from timetravel.torch.protocol.frames import read_frame, write_frame
from timetravel.torch.rank.process import become_subreaper, die_with_parent


def main() -> None:
    die_with_parent()
    become_subreaper()  # rank checkpoints are handed to the zygote (rank_checkpoint.py)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # reap ranks automatically
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
