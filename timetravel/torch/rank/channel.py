"""A rank's one connection to the coordinator (rank side; no torch here).

Every call a rank makes to the World goes through :class:`Channel`: it stamps the message with the
rank's logical time (its clock, which the coordinator sets at every completion), sends it, and for a
blocking call waits for the reply. Between two calls the rank runs freely — nothing it can observe
depends on what the other ranks do meanwhile.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable
from typing import Any, NoReturn

from timetravel.torch.protocol.wire import receive_message, send_message

WORK_CHARGED_KINDS = ("call", "exit")
"""The messages at which the World charges a rank's compute (scenario: the compute model)."""
NON_BLOCKING_KINDS = frozenset({"metric", "output", "warning", "step", "probe", "state_bytes"})
"""Messages that do not end the rank's stretch of free running (``before_blocking`` skips them)."""


WAITING_REQUESTS = ("checkpoint", "probe", "state_pull")
"""What the coordinator may ask of a rank that waits (or lingers after its exit) before it answers."""


class StopRank(BaseException):
    """The coordinator ended the run: unwind the script without running its except clauses."""


class Channel:
    """One rank's channel. Safe to use from several threads: a message is sent whole under a lock
    (two threads' bytes never interleave), and a call's send and its reply's receipt are one step
    under another (a thread never reads another's reply). The World orders a rank's messages as they
    come, so only the rank's own thread may make calls that decide anything (backend.py refuses a
    collective from another thread)."""

    def __init__(self, sock: socket.socket, rank: int, clock: Any) -> None:
        """``clock``: the rank's :class:`~timetravel.torch.rank.env.clock.RankClock` (now_ns, set)."""
        self._send_lock = threading.RLock()
        """Held while one message is stamped and sent (re-entered by the ``before_blocking`` hooks)."""
        self._call_lock = threading.RLock()
        """Held from a call's send to its reply (a checkpoint forked meanwhile resumes holding it)."""
        self.sock = sock
        self.rank = rank
        self.clock = clock
        self.work_count = 0
        self.work_meter: Any = None
        """The ``flops`` compute model's meter (:mod:`timetravel.torch.rank.env.work_model`), or None."""
        self.before_blocking: list[Callable[[], None]] = []
        """Called before every message other than a metric, output, warning, step or probe (the loss
        capture sends the last step's loss there: :mod:`timetravel.torch.rank.env.loss_capture`)."""
        self.on_probe: Callable[[dict[str, Any]], None] | None = None
        """explain's module probe, asked for while this rank waits (rank/setup.py installs it)."""
        self.at_script_end: list[Callable[[], None]] = []
        """Called when the script returned or raised, before the exit message (``--against-real``'s
        capture writes its last record there)."""
        self.call_observers: list[Callable[[dict[str, Any], list[Any]], None]] = []
        """Called with each collective's call message and input tensors before it is posted (explain's
        watches read them; rank/backend.py). They only read: what the World receives is unchanged."""
        self.result_observers: list[Callable[[dict[str, Any], list[Any]], None]] = []
        """Called with each collective's call message and the tensors it wrote once its result arrived
        (``diff --ops`` hashes them as ops of their own)."""
        self.on_state_pull: Callable[[dict[str, Any]], None] | None = None
        """Send the bytes of the latest state step's tensors, asked for while this rank waits or
        lingers (rank/setup.py sets it to the state reporter's ``serve_pull``)."""
        self.on_checkpoint: Callable[[Channel, dict[str, Any]], None] | None = None
        """Fork a checkpoint of this process, asked for while it waits (rank/main.py sets it to
        :func:`timetravel.torch.rank.checkpoint.take`; the channel itself knows nothing of forks)."""

    def post(self, message: dict[str, Any], t_ns: int | None = None) -> None:
        """Send without waiting (a non-blocking op, output, a metric), stamped with the rank's
        logical time (or ``t_ns``, an earlier moment of this rank: the coordinator never goes back).

        A call or the rank's exit also carries the compute the rank did since its previous one
        (``work_ns``) when the ``flops`` compute model meters it: the World charges it."""
        with self._send_lock:
            if self.before_blocking and message.get("kind") not in NON_BLOCKING_KINDS:
                for hook in self.before_blocking:
                    hook()
            message["t_ns"] = self.clock.now_ns() if t_ns is None else t_ns
            if self.work_meter is not None and message.get("kind") in WORK_CHARGED_KINDS:
                message["work_ns"] = self.work_meter.take_ns()
            send_message(self.sock, message)

    def call(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send and wait for the coordinator's reply; the clock moves to the reply's time."""
        with self._call_lock:
            self.post(message)
            reply = receive_message(self.sock)
            while reply.get("kind") in WAITING_REQUESTS:
                self._while_waiting(reply)  # a quiescent point: fork a copy, install the probe, a pull
                reply = receive_message(self.sock)
        if reply.get("kind") == "stop":
            raise StopRank()
        self.clock.set(max(self.clock.now_ns(), int(reply["t_ns"])))
        return reply

    def abort(self, exit_message: dict[str, Any]) -> NoReturn:
        """Send the rank's ``exit`` message and end the process at once, whatever its other threads
        are doing: nothing can follow the message on the channel (backend.py, a collective from
        another thread)."""
        with self._send_lock:
            try:
                self.post(exit_message)
            finally:
                os._exit(int(exit_message["code"]) & 0xFF)

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
            if reply.get("kind") not in WAITING_REQUESTS:
                return
            self._while_waiting(reply)

    def _while_waiting(self, request: dict[str, Any]) -> None:
        """A request the coordinator sends a waiting rank: fork a checkpoint, or install explain's
        module probe (read-only hooks) in this process, which a probe re-execution resumed."""
        if request.get("kind") == "checkpoint":
            assert self.on_checkpoint is not None, "a checkpoint asked of a rank that cannot fork one"
            self.on_checkpoint(self, request)
        elif request.get("kind") == "state_pull":
            if self.on_state_pull is not None:
                self.on_state_pull(request)
            else:  # the rank never set up (it failed before): nothing to send
                self.post({"kind": "state_bytes", "step": request.get("step"), "tensors": {}, "stale": True})
        elif self.on_probe is not None:
            self.on_probe(request)
        else:  # the script ended, or never set the rank up: nothing to hook
            self.post(
                {"kind": "probe", "step": request.get("step"), "finding": None, "refused": "no rank set-up"}
            )

    def next_work_id(self) -> int:
        with self._send_lock:
            self.work_count += 1
            return self.work_count
