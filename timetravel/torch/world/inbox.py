"""What every rank of a driver has sent, read as it arrives (coordinator side).

The World reads a rank's messages at the rank's ``poll`` event, in order. If the coordinator read a
rank's channel only then, a rank sending more than the socket buffer holds (a 1 MB gradient bucket,
its training state at a step) would block in ``sendall`` until its poll: ranks would compute one after
another although each was handed its result at once. So whenever the coordinator waits for one rank,
it reads whatever any rank of the driver has sent (``select`` over their channels) into that rank's
queue; a poll takes messages from the queue first. The order of each rank's messages is kept, and so
is where its channel ended or broke: a queue holds that as its last entry, raised when a poll reaches
it, at the same place in the World as before. Bounded: a rank sends nothing after a blocking message
(a wait, its exit) until the World answers, so a queue holds at most one step's messages.
"""

from __future__ import annotations

import select
import socket
import time
from collections import deque
from typing import Any

from timetravel.torch.protocol.wire import ChannelClosed, MessageReader, Outgoing, ProtocolError

READ_BYTES_MAX = 1 << 22
"""One ``recv`` of a message body: a large message arrives in several reads, and the other channels
are read in between."""
BLOCKING_KINDS = ("wait", "exit")
"""The messages after which a rank sends nothing until the World answers: ``wait`` (it blocks for a
result) and ``exit`` (its script ended; it lingers until the coordinator closes its channel)."""


MESSAGES_PER_POLL_MAX = 1 << 20
"""Messages one poll reads before the rank must block (metrics and output lines between two calls)."""


class Inboxes:
    """Per rank: the messages read from its channel that no poll has taken yet; see the module docstring."""

    def __init__(self) -> None:
        self.queues: dict[int, deque[Any]] = {}
        self.readers: dict[int, MessageReader] = {}
        self.ended: set[int] = set()
        """Ranks whose channel ended or broke (the queue's last entry says how): not read again."""

    def queued(self, rank: int) -> bool:
        return bool(self.queues.get(rank))

    def take(self, rank: int) -> dict[str, Any]:
        """The rank's next queued message (raises the error its channel ended with, at its place)."""
        entry = self.queues[rank].popleft()
        if isinstance(entry, BaseException):
            self.queues[rank].appendleft(entry)  # every later read meets the same end
            raise entry
        message: dict[str, Any] = entry
        return message

    def take_until_blocked(
        self, rank: int, sockets: dict[int, socket.socket], timeout_s: float
    ) -> tuple[list[dict[str, Any]], BaseException | None]:
        """The rank's next messages, up to the first that blocks it (a wait, its exit), and how the
        channel ended if it did first (ChannelClosed, ProtocolError; a ``TimeoutError`` when
        ``timeout_s`` wall seconds pass without its next message). At most MESSAGES_PER_POLL_MAX."""
        taken: list[dict[str, Any]] = []
        while len(taken) < MESSAGES_PER_POLL_MAX:
            if not self.wait_for(rank, sockets, timeout_s):
                return taken, TimeoutError(rank)
            try:
                message = self.take(rank)
            except (ChannelClosed, ProtocolError) as error:
                return taken, error
            taken.append(message)
            if message.get("kind") in BLOCKING_KINDS:
                return taken, None
        return taken, ProtocolError(
            f"r{rank} sent {MESSAGES_PER_POLL_MAX} messages without waiting on the World"
        )

    def messages(self, rank: int) -> list[dict[str, Any]]:
        """The queued messages of a rank (a checkpoint keeps them for the ranks resumed from it)."""
        return [entry for entry in self.queues.get(rank, ()) if not isinstance(entry, BaseException)]

    def put(self, rank: int, messages: list[dict[str, Any]]) -> None:
        self.queues.setdefault(rank, deque()).extend(messages)

    def forget(self, rank: int) -> None:
        self.queues.pop(rank, None)
        self.readers.pop(rank, None)
        self.ended.discard(rank)

    def clear(self) -> None:
        self.queues.clear()
        self.readers.clear()
        self.ended.clear()

    def blocked(self, rank: int) -> bool:
        """The rank's last queued message blocks it (a wait, its exit): it sends nothing more."""
        queue = self.queues.get(rank)
        if not queue or not isinstance(queue[-1], dict):
            return False
        return queue[-1].get("kind") in BLOCKING_KINDS

    def end(self, rank: int) -> BaseException | None:
        """How the rank's channel ended, if it did (the queue's last entry)."""
        queue = self.queues.get(rank)
        return queue[-1] if queue and isinstance(queue[-1], BaseException) else None

    def wait_for(
        self, rank: int, sockets: dict[int, socket.socket], timeout_s: float, count: int = 1
    ) -> bool:
        """Read every channel as data arrives until ``rank`` has ``count`` queued entries; False after
        ``timeout_s`` wall seconds without them (the caller says the rank is stuck)."""
        deadline = time.monotonic() + timeout_s
        while len(self.queues.get(rank, ())) < count:
            if rank not in sockets:
                raise KeyError(rank)  # as a read of a channel the driver does not hold
            if rank in self.ended:  # ended with nothing queued: a poll reads the end again
                self.queues.setdefault(rank, deque()).append(ChannelClosed("the channel ended"))
                return True
            readable = {sockets[r]: r for r in sorted(sockets) if r not in self.ended}
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            ready, _, _ = select.select(list(readable), [], [], remaining)
            for channel in ready:
                self._read(readable[channel], channel)
        return True

    def send(
        self, rank: int, sockets: dict[int, socket.socket], buffers: list[Any], timeout_s: float
    ) -> None:
        """Write a message's ``buffers`` (wire.encode_message) to ``rank``'s channel, reading every
        channel meanwhile.

        A rank may be sending a large message (its step's state) at the moment the World hands it a
        large result: each side blocked in ``sendall`` on a full buffer while nobody reads is a
        deadlock (seen in a branch's re-execution). So the coordinator writes only what the
        channel takes at once and reads whatever arrives in between. Past ``timeout_s`` wall seconds
        (a rank that has stopped reading) it falls back to a blocking write."""
        target = sockets[rank]
        deadline = time.monotonic() + timeout_s
        outgoing = Outgoing(buffers)
        while not outgoing.done():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                while not outgoing.done():
                    outgoing.send(target)
                return
            readable = {sockets[r]: r for r in sorted(sockets) if r not in self.ended}
            ready, writable, _ = select.select(list(readable), [target], [], remaining)
            for channel in ready:
                self._read(readable[channel], channel)
            if writable:
                try:
                    outgoing.send(target, socket.MSG_DONTWAIT)
                except BlockingIOError:
                    continue

    def _read(self, rank: int, channel: socket.socket) -> None:
        """Take what the channel holds now into the rank's message in progress, up to its end (a
        partial read resumes at the next one: wire.MessageReader keeps where it is)."""
        reader = self.readers.get(rank)
        if reader is None:
            reader = self.readers[rank] = MessageReader(writable=False)
        try:
            while True:  # on while each read fills what it asked for: the prefix, then the body...
                with reader.target() as view:
                    asked = min(READ_BYTES_MAX, len(view))
                    count = channel.recv_into(view, asked, socket.MSG_DONTWAIT)
                if count == 0:
                    self._end(rank, ChannelClosed("the other side closed the channel"))
                    return
                message = reader.advance(count)
                if message is not None:
                    del self.readers[rank]
                    self.queues.setdefault(rank, deque()).append(message)
                    return
                if count < asked:
                    return  # the channel holds no more for now: select again
        except ProtocolError as error:
            self._end(rank, error)
        except (BlockingIOError, InterruptedError, TimeoutError):
            return  # nothing after all: select again
        except OSError as error:
            self._end(rank, ChannelClosed(str(error)))

    def _end(self, rank: int, error: BaseException) -> None:
        self.ended.add(rank)
        self.readers.pop(rank, None)
        self.queues.setdefault(rank, deque()).append(error)
