"""The live rank processes of one world's execution, and the zygote they are forked from (coordinator side).

The World is data; the ranks' Python stacks are not. A :class:`RankDriver` holds one execution's
rank processes — ``spawn`` (forked by the :class:`Zygote`), ``receive`` (a rank's next call to the
World), ``offer``/``deliver`` (a collective's result), ``kill``, ``restart``, ``stop`` — and is owned
by a :class:`~timetravel.torch.world.host.RankHost`, which a run's Simulation or a torch Session's
world source owns in turn. Ranks connect back over a Unix socket in a private temporary folder.
Everything here is bounded: start-up and every receive have a wall timeout (a rank that never calls
the World again is ``stuck``), and ``stop`` kills every rank.

The zygote is a process-wide resource, not run state: one per coordinator process (it imports torch
once, ~2 s), started on first use and reused by every run and Session; it dies with the process.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
import weakref
from typing import Any, TextIO

from timetravel.torch.protocol import arrays
from timetravel.torch.protocol.frames import read_frame, write_frame
from timetravel.torch.protocol.limits import RANK_START_TIMEOUT_S
from timetravel.torch.protocol.wire import ChannelClosed, ProtocolError, encode_message, receive_message
from timetravel.torch.world.inbox import Inboxes
from timetravel.torch.world.rank_sessions import end_sessions

ACCEPT_POLL_S = 0.2
"""While resumed ranks are awaited, whether their checkpoints still live is looked at this often."""


class RankStartError(RuntimeError):
    """The zygote or a rank could not be started (torch missing, a rank that never said hello)."""


class RankStuck(TimeoutError):
    """A rank ran longer than the wall-clock watchdog allows without calling the World."""


class Zygote:
    """``python -P -m timetravel.torch.rank.zygote``: imports torch once, forks ranks on request.

    ``-P``: the working directory is not put on ``sys.path`` (a folder holding another ``timetravel``
    checkout or a module named like one of torch's would otherwise shadow them); a rank puts its
    script's folder there, as ``torchrun`` does. ``PYTHONHASHSEED``: ``hash_seed``, whatever the
    caller's: CPython draws its string hash secret when a process starts, and every rank is a fork of
    this one, so the order in which a rank iterates a set of strings is the same in every run."""

    def __init__(self, hash_seed: int) -> None:
        self.hash_seed = hash_seed
        self.process = subprocess.Popen(
            [sys.executable, "-P", "-m", "timetravel.torch.rank.zygote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            close_fds=True,
            env={**os.environ, "PYTHONHASHSEED": str(hash_seed)},
        )
        try:
            ready = self._reply(RANK_START_TIMEOUT_S)
        except BaseException:  # Ctrl-C while torch is imported: it has started nothing yet
            self.process.kill()
            self.process.wait()
            raise
        if not ready or not ready.get("ready"):
            self.close()
            raise RankStartError(
                "the rank zygote did not start (is torch installed? pip install 'timetravel[torch]')"
            )
        self.torch_version = str(ready.get("torch"))

    def alive(self) -> bool:
        return self.process.poll() is None

    def fork(self, spec: dict[str, Any]) -> int:
        assert self.process.stdin is not None
        write_frame(self.process.stdin, spec)  # type: ignore[arg-type]
        reply = self._reply(RANK_START_TIMEOUT_S)
        if not reply or "pid" not in reply:
            raise RankStartError("the rank zygote stopped answering")
        return int(reply["pid"])

    def _reply(self, timeout_s: float) -> dict[str, Any] | None:
        assert self.process.stdout is not None
        readable, _, _ = select.select([self.process.stdout], [], [], timeout_s)
        if not readable:
            return None
        try:
            return read_frame(self.process.stdout)  # type: ignore[arg-type]
        except ValueError:
            return None

    def close(self) -> None:
        """End the zygote and everything below it: its stdin closes, it kills every descendant and
        exits (rank/zygote.py); killed past ZYGOTE_END_TIMEOUT_S."""
        for pipe in (self.process.stdin, self.process.stdout):
            with contextlib.suppress(OSError):
                if pipe is not None:
                    pipe.close()
        try:
            self.process.wait(timeout=ZYGOTE_END_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                self.process.kill()
            with contextlib.suppress(OSError, subprocess.TimeoutExpired):
                self.process.wait(timeout=ZYGOTE_END_TIMEOUT_S)


KILLED_NAMED_MAX = 64
"""Processes left running by ranks that a driver or host names (restarts and a Session's
re-executions may kill a rank's children many times)."""
ZYGOTE_END_TIMEOUT_S = 5.0
"""Wall seconds for a zygote to end its descendants and exit once its stdin closed."""
ZYGOTES_MAX = 4
"""Zygotes one process may start: one per ``python_hash_seed`` in use. None is ended to make room (its
ranks and checkpoints would end with it): a fifth hash seed in one process is refused."""
_zygotes: dict[int, Zygote] = {}
"""The process's zygotes by hash seed (see the module docstring)."""
_live_drivers: weakref.WeakSet[RankDriver] = weakref.WeakSet()
"""Every driver not stopped yet, for the exit hook only (their hosts stop them in every other case)."""


def zygote(hash_seed: int) -> Zygote:
    """The process's zygote whose ranks hash strings with ``hash_seed``, started on first use (again
    if it died)."""
    source = _zygotes.get(hash_seed)
    if source is None or not source.alive():
        if source is None and len(_zygotes) >= ZYGOTES_MAX:
            raise RankStartError(
                f"one process runs ranks with at most {ZYGOTES_MAX} values of python_hash_seed "
                f"({sorted(_zygotes)} so far)"
            )
        source = _zygotes[hash_seed] = Zygote(hash_seed)
    return source


class RankDriver:
    """The live rank processes of one run; see the module docstring."""

    def __init__(
        self,
        specs: list[dict[str, Any]],
        *,
        output: TextIO | None,
        stuck_timeout_s: float,
        hash_seed: int = 0,
    ) -> None:
        """``hash_seed``: the ``PYTHONHASHSEED`` of the zygote the ranks are forked from."""
        self.specs = specs
        self.hash_seed = hash_seed
        self.output = output
        self.stuck_timeout_s = stuck_timeout_s
        self.workdir: Any = None
        """The ranks' private working directory (world/workdir.py): closed with the driver when it
        ``owns_workdir``; a Session's checkpoints may still need it (the world source closes it then)."""
        self.owns_workdir = True
        self.host: Any = None
        """The RankHost that started this driver (it forgets the driver when it stops)."""
        self.world_ref: weakref.ref[Any] | None = None
        """The World this driver's ranks belong to, held weakly (:attr:`world`)."""
        self.pids: dict[int, int] = {}
        self.sockets: dict[int, socket.socket] = {}
        self.delivered: dict[int, int] = {}
        """Per rank: the number of the last result its process has received."""
        self.pending: dict[int, tuple[int, dict[str, Any]]] = {}
        """Per rank: the result known to the coordinator and not sent yet, with its number."""
        self.inboxes = Inboxes()
        """Per rank: messages read from its channel before its ``poll`` asked (torch/inbox.py)."""
        self.killed: list[str] = []
        """Processes the ranks started that were still running when their rank was ended (``r0: sleep``)."""
        self.folder = tempfile.mkdtemp(prefix="timetravel-ranks-")
        self.address = os.path.join(self.folder, "coordinator.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.address)
        self.listener.listen(len(specs))

    @property
    def world(self) -> Any:
        """The World this driver's ranks belong to (compared by identity; held weakly: a world
        nothing else holds can never run again, and its host then stops this driver). None once stopped."""
        return self.world_ref() if self.world_ref is not None else None

    def bind(self, world: Any) -> None:
        self.world_ref = weakref.ref(world)
        _live_drivers.add(self)

    def accept_resumed(self, ranks: list[int], token: int, gone: Any = None) -> None:
        """Take the channels of ranks resumed from checkpoint set ``token`` (checkpoints.py);
        ``gone()`` says, while they are awaited, that the checkpoints died (killed as they were asked
        to resume): then at once, not after RANK_START_TIMEOUT_S."""
        for _ in ranks:
            connection = self._accept_within(RANK_START_TIMEOUT_S, gone)
            connection.settimeout(RANK_START_TIMEOUT_S)
            hello = receive_message(connection)
            connection.settimeout(None)
            if hello.get("resumed") != token or int(hello["rank"]) not in ranks:
                connection.close()
                raise RankStartError(f"an unexpected rank connected while resuming: {hello.get('rank')}")
            self.sockets[int(hello["rank"])] = connection
            self.pids[int(hello["rank"])] = int(hello["pid"])

    def _accept_within(self, timeout_s: float, gone: Any) -> socket.socket:
        waited_s = 0.0
        while True:
            step_s = min(ACCEPT_POLL_S, timeout_s - waited_s) if gone is not None else timeout_s
            self.listener.settimeout(step_s)
            try:
                connection, _address = self.listener.accept()
                return connection
            except TimeoutError:
                waited_s += step_s
                if waited_s >= timeout_s:
                    raise RankStartError(
                        "a resumed rank did not connect to the coordinator in time"
                    ) from None
                if gone():
                    raise RankStartError("a checkpoint died while its ranks resumed") from None

    def offer(self, rank: int, number: int, message: dict[str, Any]) -> None:
        """Result ``number`` is known: send it now, so that ranks compute in parallel between
        collectives. The rank's process then runs ahead of the World by at most one result (its next
        result needs its next wait, which the World reads at the poll this result schedules); the
        World is the same bits either way: what the rank sends is a function of what it was handed."""
        self.pending[rank] = (number, message)
        self.deliver(rank, number)

    def ahead(self, rank: int, delivered: int) -> bool:
        """The rank's process was handed more results than the World's ``delivered`` count says."""
        return self.delivered.get(rank, 0) > delivered

    def quiesce(self, rank: int) -> None:
        """Read what a rank that runs ahead sends until it blocks again (a wait, or its exit): then
        its process waits, as at a moment between two events, and can be forked; its poll reads the
        same messages from the inbox. Raises ChannelClosed, ProtocolError or RankStuck."""
        inboxes = self.inboxes
        while not inboxes.blocked(rank):
            ended = inboxes.end(rank)
            if ended is not None:
                raise ended
            more = len(inboxes.queues.get(rank, ())) + 1
            if not inboxes.wait_for(rank, self.sockets, self.stuck_timeout_s, more):
                raise self._stuck(rank)

    def deliver(self, rank: int, number: int) -> None:
        """Make sure the rank's process has result ``number`` (sent once, whoever asks first)."""
        if self.delivered.get(rank, 0) >= number:
            return
        entry = self.pending.pop(rank, None)
        if entry is None or entry[0] != number:
            raise RankStartError(f"result {number} of r{rank} is not known to the coordinator")
        self.delivered[rank] = number
        self.send(rank, entry[1])

    def restart(self, specs: list[dict[str, Any]]) -> None:
        """Kill every rank and fork them again from ``specs`` (a torchelastic restart)."""
        self._end(list(self.pids))
        self.pids.clear()
        self.delivered.clear()
        self.pending.clear()
        self.inboxes.clear()
        self.specs = specs
        self._spawn()

    def _spawn(self) -> None:
        self.spawn([spec["rank"] for spec in self.specs])

    def spawn(self, ranks: list[int]) -> None:
        """Fork ``ranks`` fresh from the zygote and take their channels."""
        source = zygote(self.hash_seed)
        for spec in self.specs:
            if spec["rank"] in ranks:
                spec["socket"] = self.address
                self.pids[spec["rank"]] = source.fork(spec)
        self.listener.settimeout(RANK_START_TIMEOUT_S)
        for _ in ranks:
            try:
                connection, _address = self.listener.accept()
            except TimeoutError:
                raise RankStartError("a rank did not connect to the coordinator in time") from None
            connection.settimeout(None)
            hello = receive_message(connection)
            self.sockets[int(hello["rank"])] = connection

    def receive(self, rank: int) -> dict[str, Any]:
        """The rank's next message. Raises ChannelClosed if it died, ProtocolError for a malformed
        message, RankStuck past the watchdog. Meanwhile every rank's channel is read (inbox.py)."""
        if not self.inboxes.wait_for(rank, self.sockets, self.stuck_timeout_s):
            raise self._stuck(rank)
        return self.inboxes.take(rank)

    def receive_until_blocked(self, rank: int) -> tuple[list[dict[str, Any]], BaseException | None]:
        """The rank's next messages up to the one that blocks it (a wait, its exit), its output shown
        here and left out, and how it ended if it did first: ChannelClosed (it died), ProtocolError
        (a malformed message) or RankStuck (past the watchdog). Meanwhile every channel is read."""
        messages, ended = self.inboxes.take_until_blocked(rank, self.sockets, self.stuck_timeout_s)
        kept = []
        for message in messages:
            if message.get("kind") == "output":
                self.emit(rank, message["stream"], message["lines"])
            else:
                kept.append(message)
        if isinstance(ended, TimeoutError) and not isinstance(ended, RankStuck):
            ended = self._stuck(rank)
        return kept, ended

    def pull(self, rank: int, request: dict[str, Any]) -> dict[str, Any]:
        """Ask a rank that waits (or lingers after its exit) for its latest state step's bytes
        (``{"kind": "state_pull", "step", "paths"}``: rank/state.py ``serve_pull``) and read its
        ``state_bytes`` reply. Raises ChannelClosed, ProtocolError or RankStuck."""
        self.send(rank, request)
        while True:
            reply = self.receive(rank)
            if reply.get("kind") == "output":
                self.emit(rank, reply["stream"], reply["lines"])
            elif reply.get("kind") == "state_bytes":
                return reply
            else:
                raise ProtocolError(f"r{rank} answered a state pull with a {reply.get('kind')!r} message")

    def _stuck(self, rank: int) -> RankStuck:
        return RankStuck(f"r{rank} ran {self.stuck_timeout_s:g} s of wall time without calling the World")

    def run_to_next_wait(self, rank: int) -> None:
        """Read the rank's messages (showing its output, dropping its calls) until it waits, exits or
        dies: it is then quiescent (elastic.py settles ranks so before a restart)."""
        while rank in self.sockets:
            try:
                message = self.receive(rank)
            except (ChannelClosed, ProtocolError, TimeoutError):
                return
            if message.get("kind") == "output":
                self.emit(rank, message["stream"], message["lines"])
            elif message.get("kind") in ("wait", "exit"):
                return

    def send(self, rank: int, message: dict[str, Any]) -> None:
        connection = self.sockets.get(rank)
        if connection is None:  # seen 2 in 30 seeks of the rewind bench (a KeyError before): say which
            raise RankStartError(
                f"r{rank} has no channel in this driver (its ranks: {sorted(self.sockets)}, "
                f"{'stopped' if self.world is None else 'live'})"
            )
        buffers = encode_message(arrays.out_of_band(message))
        with contextlib.suppress(OSError):
            self.inboxes.send(rank, self.sockets, buffers, self.stuck_timeout_s)

    def kill(self, rank: int) -> None:
        """End one rank now, with every process it started (a crash fault, or a rank whose run is over)."""
        self._end([rank])

    def _end(self, ranks: list[int]) -> None:
        """End ``ranks`` and their sessions (rank_sessions.py); what they left running is noted in
        ``killed`` for the run's summary."""
        leaders = {self.pids.pop(rank): f"r{rank}" for rank in ranks if rank in self.pids}
        self.killed = (self.killed + end_sessions(leaders))[:KILLED_NAMED_MAX]
        for rank in ranks:
            connection = self.sockets.pop(rank, None)
            if connection is not None:
                connection.close()
            self.inboxes.forget(rank)

    def emit(self, rank: int, stream: str, lines: list[str]) -> None:
        if self.output is None:
            return
        target = self.output
        for line in lines:
            target.write(f"[r{rank}] {line}\n")
        target.flush()

    def stop(self) -> None:
        """Kill every rank (with what it started) and remove the socket folder. Safe to call twice."""
        self._end(list(self.pids))
        self.pids.clear()
        with contextlib.suppress(OSError):
            self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)
        if self.workdir is not None:
            self.workdir.in_use = False
            if self.owns_workdir:
                self.workdir.close()
        self.world_ref = None
        _live_drivers.discard(self)
        if self.host is not None:
            self.host.forget(self)


def _stop_everything() -> None:
    """At exit: every driver still live, the zygote. (Ranks and the zygote also die with this process.)"""
    for live in list(_live_drivers):
        live.stop()
    while _zygotes:
        _zygotes.popitem()[1].close()


atexit.register(_stop_everything)
