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


class LogicalClock:
    """The rank's logical time in integer nanoseconds; only the coordinator's replies move it far.

    ``advance`` is for what the rank itself spends (``time.sleep``, the compute model); ``set`` is the
    coordinator's completion time, never earlier than now."""

    __slots__ = ("t_ns",)

    def __init__(self, t_ns: int = 0) -> None:
        self.t_ns = t_ns

    def now_ns(self) -> int:
        return self.t_ns

    def advance(self, ns: int) -> None:
        if ns < 0:
            raise ValueError("logical time cannot go back")
        self.t_ns += ns

    def set(self, t_ns: int) -> None:
        self.t_ns = max(self.t_ns, t_ns)


class StopRank(BaseException):
    """The coordinator ended the run: unwind the script without running its except clauses."""


class Channel:
    def __init__(self, sock: socket.socket, rank: int, clock: LogicalClock | None = None) -> None:
        self.sock = sock
        self.rank = rank
        self.clock = clock or LogicalClock()
        self.work_count = 0

    def post(self, message: dict[str, Any]) -> None:
        """Send without waiting (a non-blocking op, output, a metric)."""
        message["t_ns"] = self.clock.now_ns()
        send_message(self.sock, message)

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send and wait for the coordinator's reply; the clock moves to the reply's time."""
        self.post(message)
        reply = receive_message(self.sock)
        if reply.get("kind") == "stop":
            raise StopRank()
        self.clock.set(reply["t_ns"])
        return reply

    def next_work_id(self) -> int:
        self.work_count += 1
        return self.work_count
