"""Rank checkpoints, coordinator side: take, resume, measure and discard forked copies of ranks.

The rank side is :mod:`timetravel.torch.rank.checkpoint`. Here, :class:`CheckpointKeeper` (one for
the torch Sessions of a process, owned by world_source.py) owns every checkpoint process through a control socket each: a checkpoint
lives exactly as long as its socket is open and its process answers, and dies with the zygote
whatever happens to the coordinator. A :class:`RankCheckpoints` is the set taken at one moment of
one run — a checkpoint per live rank, plus the ranks that had already ended — and is what the torch
world source (:mod:`timetravel.torch.world.world_source`) keeps beside the World's own snapshot.

Everything is bounded by wall timeouts (a checkpoint that never says hello, a resumed rank that
never connects): the caller learns the set is unusable and re-executes instead — never a hang.
"""

from __future__ import annotations

import contextlib
import copy
import os
import shutil
import signal
import socket
import tempfile
from dataclasses import dataclass, field
from typing import Any

from timetravel.torch.protocol.limits import RANK_START_TIMEOUT_S
from timetravel.torch.protocol.wire import ChannelClosed, ProtocolError, receive_message, send_message
from timetravel.torch.world.driver import RankStartError

STALE_ANSWERS_MAX = 256
"""Bound on late answers to earlier takes skipped while waiting for this one's."""


class CheckpointUnusable(RuntimeError):
    """A checkpoint was refused, died or did not answer: re-execute instead."""


@dataclass
class RankCheckpoint:
    rank: int
    pid: int
    control: socket.socket


@dataclass
class RankCheckpoints:
    """Forked copies of every live rank of one run at one quiescent moment."""

    token: int
    ranks: dict[int, RankCheckpoint] = field(default_factory=dict)
    fresh: list[int] = field(default_factory=list)
    """Ranks not polled yet: nothing to fork (their unread first messages would be lost); a resume
    starts them again from the zygote, which is what they are — a function of their spec."""
    delivered: dict[int, int] = field(default_factory=dict)
    """Per rank: how many results the process had received (one more than the World's count for a
    rank that ran ahead of it: driver.py, ``RankDriver.offer``)."""
    inbox: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    """Per rank that ran ahead: what it sent after that result, up to the wait (or exit) it was
    forked in — read before the fork (``RankDriver.quiesce``), handed to a resumed driver's polls."""
    uss_bytes: int = 0
    """Memory the checkpoints hold of their own (unique set size), measured when taken."""

    def alive(self) -> bool:
        for checkpoint in self.ranks.values():
            try:
                os.kill(checkpoint.pid, 0)
            except OSError:
                return False
            if _closed(checkpoint.control):
                return False
        return True


def _closed(control: socket.socket) -> bool:
    try:
        control.setblocking(False)
        try:
            return control.recv(1, socket.MSG_PEEK) == b""
        finally:
            control.setblocking(True)
    except BlockingIOError:
        return False
    except OSError:
        return True


def uss_bytes(pid: int) -> int:
    """Private (unique) memory of a process: what killing it would give back (``smaps_rollup``)."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup", encoding="ascii") as rollup:
            for line in rollup:
                if line.startswith(("Private_Clean:", "Private_Dirty:")):
                    total += int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return 0
    return total


class CheckpointKeeper:
    """The control end of every checkpoint process of this coordinator; see the module docstring."""

    def __init__(self) -> None:
        self.folder = tempfile.mkdtemp(prefix="timetravel-checkpoints-")
        self.address = os.path.join(self.folder, "keeper.sock")
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(self.address)
        self.listener.listen(64)
        self.tokens = 0
        self.live: dict[int, RankCheckpoints] = {}

    def take(self, driver: Any, ranks: list[int], fresh: list[int]) -> RankCheckpoints:
        """Fork ``ranks`` of ``driver`` (each blocked in a wait: the caller knows it is); ``fresh``
        ranks have not run yet and are started anew on resume."""
        self.tokens += 1
        delivered = {rank: driver.delivered.get(rank, 0) for rank in ranks}
        queued = {rank: driver.inboxes.messages(rank) for rank in ranks}
        inbox = {rank: copy.deepcopy(messages) for rank, messages in queued.items() if messages}
        taken = RankCheckpoints(self.tokens, fresh=list(fresh), delivered=delivered, inbox=inbox)
        for rank in ranks:
            driver.send(rank, {"kind": "checkpoint", "token": taken.token, "keeper": self.address})
        refusals: list[str] = []
        try:
            answered = 0
            stale = 0
            while answered < len(ranks):
                control, hello = self._accept()
                if hello.get("token") != taken.token:  # a late answer to an earlier, failed take
                    control.close()
                    stale += 1
                    if stale > STALE_ANSWERS_MAX:
                        raise CheckpointUnusable("the keeper keeps receiving answers to earlier checkpoints")
                    continue
                answered += 1
                if hello.get("kind") == "refused":
                    control.close()
                    refusals.append(f"r{hello.get('rank')}: {hello.get('why')}")
                    continue
                if hello.get("kind") != "checkpoint":
                    control.close()
                    raise CheckpointUnusable(f"an unexpected hello {hello.get('kind')!r} on the keeper")
                rank = int(hello["rank"])
                taken.ranks[rank] = RankCheckpoint(rank, int(hello["pid"]), control)
            if refusals:  # every rank answered: nothing of this take is left to arrive later
                raise CheckpointUnusable("; ".join(refusals))
        except BaseException:
            self.discard(taken)
            raise
        taken.uss_bytes = sum(uss_bytes(checkpoint.pid) for checkpoint in taken.ranks.values())
        self.live[taken.token] = taken
        return taken

    def _accept(self) -> tuple[socket.socket, dict[str, Any]]:
        self.listener.settimeout(RANK_START_TIMEOUT_S)
        try:
            control, _address = self.listener.accept()
        except TimeoutError:
            raise CheckpointUnusable("a rank checkpoint did not report in time") from None
        control.settimeout(RANK_START_TIMEOUT_S)
        try:
            hello = receive_message(control)
        except (ChannelClosed, ProtocolError, OSError) as error:
            control.close()
            raise CheckpointUnusable(f"a rank checkpoint's hello was lost: {error}") from None
        control.settimeout(None)
        return control, hello

    def resume(self, taken: RankCheckpoints, driver: Any) -> None:
        """Fork a running rank from each checkpoint into ``driver`` (which has no ranks yet)."""
        if not taken.alive():
            self.discard(taken)
            raise CheckpointUnusable("a checkpoint process died (killed, or out of memory)")
        for rank in sorted(taken.ranks):
            try:
                send_message(
                    taken.ranks[rank].control,
                    {"kind": "resume", "token": taken.token, "socket": driver.address, "cwd": _cwd(driver)},
                )
            except OSError:
                self.discard(taken)
                raise CheckpointUnusable(f"the checkpoint of r{rank} stopped answering") from None
        try:
            driver.accept_resumed(sorted(taken.ranks), taken.token, gone=lambda: not taken.alive())
        except RankStartError as error:
            self.discard(taken)
            raise CheckpointUnusable(str(error)) from None
        driver.delivered.update(taken.delivered)
        for rank, messages in taken.inbox.items():
            driver.inboxes.put(rank, copy.deepcopy(messages))  # a poll consumes (and edits) them
        if taken.fresh:
            driver.spawn(taken.fresh)

    def discard(self, taken: RankCheckpoints) -> None:
        """End the checkpoint processes of a set (thinning, or the session closing)."""
        for checkpoint in taken.ranks.values():
            with contextlib.suppress(OSError):
                checkpoint.control.close()
            with contextlib.suppress(OSError):
                os.kill(checkpoint.pid, signal.SIGKILL)
        taken.ranks.clear()
        self.live.pop(taken.token, None)

    def close(self) -> None:
        for taken in list(self.live.values()):
            self.discard(taken)
        with contextlib.suppress(OSError):
            self.listener.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _cwd(driver: Any) -> str | None:
    """The resumed ranks' working directory: the driver's own (each live execution has one), which
    may not be the one the checkpoint was forked in (torch/world_source.py)."""
    directory = getattr(driver, "workdir", None)
    return str(directory.path) if directory is not None else None
