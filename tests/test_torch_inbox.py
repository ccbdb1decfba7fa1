"""The coordinator reads every rank's channel while it waits for one (timetravel/torch/world/inbox.py).

Without it a rank sending more than a socket buffer (a gradient bucket, its step's state) blocked in
``sendall`` until the World's poll of that rank, and ranks computed one after another. What the World
sees must not change: each rank's messages in order, and a channel's end or a malformed message
raised where it was, after the messages before it. No torch needed: socket pairs stand for ranks.
"""

from __future__ import annotations

import itertools
import socket
import struct
import threading

import numpy as np
import pytest

from timetravel.torch.protocol import arrays
from timetravel.torch.protocol.wire import (
    ChannelClosed,
    ProtocolError,
    encode_message,
    receive_message,
    send_message,
)
from timetravel.torch.world.driver import RankDriver, RankStuck
from timetravel.torch.world.inbox import Inboxes

BIG_BYTES = 6 * 1024 * 1024
"""Larger than any socket buffer: a writer of this blocks until the other side reads."""


def pairs(count: int) -> tuple[dict[int, socket.socket], dict[int, socket.socket]]:
    coordinator, ranks = {}, {}
    for rank in range(count):
        coordinator[rank], ranks[rank] = socket.socketpair()
    return coordinator, ranks


def test_a_rank_sending_a_large_message_is_read_while_the_coordinator_waits_for_another() -> None:
    coordinator, ranks = pairs(2)
    sent = threading.Event()

    def rank_one() -> None:
        send_message(ranks[1], {"kind": "call", "data": b"x" * BIG_BYTES})  # blocks until read
        send_message(ranks[1], {"kind": "wait", "works": [1]})
        sent.set()
        send_message(ranks[0], {"kind": "wait", "works": [7]})  # rank 0 answers only after that

    writer = threading.Thread(target=rank_one)
    writer.start()
    inboxes = Inboxes()
    assert inboxes.wait_for(0, coordinator, timeout_s=30.0)
    writer.join(timeout=30)
    assert sent.is_set()
    assert inboxes.take(0) == {"kind": "wait", "works": [7]}
    assert inboxes.queued(1)  # read while waiting for rank 0: rank 1 never waited for its poll
    received = []
    for _ in range(2):
        assert inboxes.wait_for(1, coordinator, timeout_s=30.0)
        received.append(inboxes.take(1))
    assert [(message["kind"], len(message.get("data", b""))) for message in received] == [
        ("call", BIG_BYTES),
        ("wait", 0),
    ]


def test_a_closed_channel_is_raised_after_the_messages_before_it_and_again_after() -> None:
    coordinator, ranks = pairs(1)
    send_message(ranks[0], {"kind": "output", "lines": ["a"]})
    send_message(ranks[0], {"kind": "output", "lines": ["b"]})
    ranks[0].close()
    inboxes = Inboxes()
    for expected in ("a", "b"):
        assert inboxes.wait_for(0, coordinator, timeout_s=5.0)
        assert inboxes.take(0)["lines"] == [expected]
    for _ in range(2):
        assert inboxes.wait_for(0, coordinator, timeout_s=5.0)
        with pytest.raises(ChannelClosed):
            inboxes.take(0)


def test_a_malformed_message_is_raised_at_its_place() -> None:
    coordinator, ranks = pairs(1)
    send_message(ranks[0], {"kind": "output", "lines": ["fine"]})
    ranks[0].sendall(struct.pack("<II", 3, 0) + b"\xc1\xc1\xc1")  # 0xc1 is never valid msgpack
    inboxes = Inboxes()
    assert inboxes.wait_for(0, coordinator, timeout_s=5.0)
    assert inboxes.take(0)["lines"] == ["fine"]
    assert inboxes.wait_for(0, coordinator, timeout_s=5.0)
    with pytest.raises(ProtocolError):
        inboxes.take(0)


def test_waiting_for_a_silent_rank_times_out() -> None:
    coordinator, _ranks = pairs(1)
    assert Inboxes().wait_for(0, coordinator, timeout_s=0.05) is False


def driver_over(coordinator: dict[int, socket.socket], stuck_timeout_s: float = 5.0) -> RankDriver:
    live = RankDriver([], output=None, stuck_timeout_s=stuck_timeout_s)
    live.sockets.update(coordinator)
    return live


def test_quiesce_reads_a_rank_that_ran_ahead_until_it_blocks_and_its_poll_reads_the_same() -> None:
    coordinator, ranks = pairs(1)
    messages = [
        {"kind": "call", "id": 3, "inputs": []},
        {"kind": "output", "stream": "stdout", "lines": ["step 2"]},
        {"kind": "wait", "works": [3]},
    ]
    for message in messages:
        send_message(ranks[0], message)
    live = driver_over(coordinator)
    try:
        live.quiesce(0)
        assert live.inboxes.blocked(0)
        assert live.inboxes.messages(0) == messages
        assert [live.receive(0) for _ in messages] == messages
    finally:
        live.stop()


def test_quiesce_of_a_rank_that_never_blocks_says_it_is_stuck() -> None:
    coordinator, ranks = pairs(1)
    send_message(ranks[0], {"kind": "call", "id": 1, "inputs": []})
    live = driver_over(coordinator, stuck_timeout_s=0.05)
    try:
        with pytest.raises(RankStuck):
            live.quiesce(0)
        assert live.receive(0)["kind"] == "call"  # what was read stays for the poll
    finally:
        live.stop()


def test_the_coordinator_sending_a_large_result_reads_a_rank_sending_a_large_message() -> None:
    """The deadlock a branch's re-execution met: the World hands a rank a large result while the rank
    sends its step's state; each side in ``sendall`` on a full buffer, nobody read. Before the fix the
    coordinator blocked in ``sendall`` and this test's rank never got to read."""
    coordinator, ranks = pairs(2)
    received: list[dict] = []

    def rank_one() -> None:
        send_message(ranks[1], {"kind": "state", "data": b"s" * BIG_BYTES})  # blocks until read
        received.append(receive_message(ranks[1]))

    thread = threading.Thread(target=rank_one, daemon=True)
    thread.start()
    inboxes = Inboxes()
    inboxes.send(1, coordinator, encode_message({"kind": "result", "data": b"r" * BIG_BYTES}), timeout_s=60.0)
    thread.join(timeout=60)
    assert not thread.is_alive() and received[0]["data"] == b"r" * BIG_BYTES
    assert inboxes.take(1)["data"] == b"s" * BIG_BYTES  # what the rank sent meanwhile is queued, whole


def test_a_framed_message_arriving_in_pieces_is_read_between_another_ranks_messages() -> None:
    """Tensors travel as frames after the msgpack skeleton (torch/wire.py): a read that stops inside
    the prefix, the frame-size table, the skeleton or a frame resumes there at the channel's next read,
    while the coordinator keeps taking the other rank's messages."""
    coordinator, ranks = pairs(2)
    weights = np.arange(200_000, dtype=np.float32)
    message = {
        "kind": "step",
        "state": {"w": {"dtype": "float32", "shape": [200_000], "data": weights}, "b": np.ones(3)},
    }
    data = b"".join(bytes(buffer) for buffer in encode_message(message))
    cuts = [0, 3, 8, 10, 13, 40, 100, 5_000, 60_000]  # inside each part of the message, each piece
    inboxes = Inboxes()  # smaller than a socket buffer (so that this thread's sendall returns)
    for number, (start, end) in enumerate(itertools.pairwise(cuts)):
        ranks[1].sendall(data[start:end])
        send_message(ranks[0], {"kind": "output", "lines": [str(number)]})
        assert inboxes.wait_for(0, coordinator, timeout_s=5.0)
        assert inboxes.take(0)["lines"] == [str(number)]
        assert not inboxes.queued(1)
    assert not inboxes.readers[1].idle()  # a message in progress, read up to where its bytes end
    rest = threading.Thread(target=ranks[1].sendall, args=(data[cuts[-1] :],))
    rest.start()
    assert inboxes.wait_for(1, coordinator, timeout_s=5.0)
    received = inboxes.take(1)
    assert arrays.decode(received["state"]["w"]).tobytes() == weights.tobytes()
    assert received["state"]["b"] == np.ones(3).tobytes()  # a small array rides inline, as bytes
    rest.join(timeout=5)
    assert not inboxes.queued(1) and 1 not in inboxes.readers


def test_the_coordinator_sending_framed_results_reads_a_rank_sending_framed_state() -> None:
    """The deadlock of the test above, with tensors as frames both ways (the World's result lifted out
    of its ``bytes`` by arrays.out_of_band, the rank's state from numpy views)."""
    coordinator, ranks = pairs(2)
    state = np.full(BIG_BYTES // 4, 7, dtype=np.float32)
    result = arrays.encode(np.full(BIG_BYTES // 8, 3.0), "float64")
    received: list[dict] = []

    def rank_one() -> None:
        send_message(
            ranks[1], {"kind": "step", "w": {"dtype": "float32", "shape": [state.size], "data": state}}
        )
        received.append(receive_message(ranks[1]))

    thread = threading.Thread(target=rank_one, daemon=True)
    thread.start()
    inboxes = Inboxes()
    message = {"kind": "result", "t_ns": 1, "results": {"1": [result]}}
    inboxes.send(1, coordinator, encode_message(arrays.out_of_band(message)), timeout_s=60.0)
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert bytes(received[0]["results"]["1"][0]["data"]) == result["data"]
    assert arrays.decode(inboxes.take(1)["w"]).tobytes() == state.tobytes()
