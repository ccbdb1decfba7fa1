"""A rank's one connection to the coordinator (rank side; no torch here).

Every call a rank makes to the World goes through :class:`Channel`: it stamps the message with the
rank's logical time (its clock, which the coordinator sets at every completion), sends it, and for a
blocking call waits for the reply. Between two calls the rank runs freely — nothing it can observe
depends on what the other ranks do meanwhile.
"""

from __future__ import annotations

import socket
from typing import Any

from timetravel.torch.wire import receive_message, send_message


class StopRank(BaseException):
    """The coordinator ended the run: unwind the script without running its except clauses."""


class Channel:
    def __init__(self, sock: socket.socket, rank: int, clock: Any) -> None:
        """``clock``: the rank's :class:`~timetravel.torch.rank_env.clock.RankClock` (now_ns, set)."""
        self.sock = sock
        self.rank = rank
        self.clock = clock
        self.work_count = 0

    def post(self, message: dict[str, Any]) -> None:
        """Send without waiting (a non-blocking op, output, a metric)."""
        message["t_ns"] = self.clock.now_ns()
        send_message(self.sock, message)

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send and wait for the coordinator's reply; the clock moves to the reply's time."""
        self.post(message)
        reply = receive_message(self.sock)
        while reply.get("kind") == "checkpoint":  # a quiescent point: fork a copy, then keep waiting
            from timetravel.torch import rank_checkpoint

            rank_checkpoint.take(self, reply)
            reply = receive_message(self.sock)
        if reply.get("kind") == "stop":
            raise StopRank()
        self.clock.set(max(self.clock.now_ns(), int(reply["t_ns"])))
        return reply

    def linger(self) -> None:
        """After the exit message, wait until the coordinator closes the channel (or kills us).

        The World reads a rank's messages at its ``poll``, and the rank may run ahead of it to its
        end: a checkpoint taken at that moment must still find a process to fork (it is forked here,
        and a rank resumed from it lingers in turn). Anything but a checkpoint request ends it."""
        while True:
            try:
                reply = receive_message(self.sock)
            except (OSError, ValueError):
                return
            if reply.get("kind") != "checkpoint":
                return
            from timetravel.torch import rank_checkpoint

            rank_checkpoint.take(self, reply)

    def next_work_id(self) -> int:
        self.work_count += 1
        return self.work_count
