"""The wire between a rank and the coordinator (timetravel/torch/protocol/wire.py): tensors' bytes out of band.

What users rely on: a tensor arrives with the same bits, and large ones cross with no copy on either
side (the step state of a 1M-parameter model is ~20 MB per rank per step); a malformed or oversized
message from a rank is a ProtocolError, found from the counts before anything they announce is read.
No torch for the framing itself; the rank-side tensor conversions import it.
"""

from __future__ import annotations

import socket
import struct
import threading

import msgpack
import numpy as np
import pytest

from timetravel.torch.protocol import arrays, wire
from timetravel.torch.protocol.limits import FRAME_BYTES_MIN, FRAMES_MAX, MESSAGE_BYTES_MAX
from timetravel.torch.protocol.wire import (
    MessageReader,
    ProtocolError,
    encode_message,
    receive_message,
    send_message,
)
from timetravel.torch.world.world_copy import immutable

LARGE = np.arange(300_000, dtype=np.float32)
"""1.2 MB: a frame."""
SMALL = np.arange(5, dtype=np.int64)
"""40 bytes: inline in the skeleton."""


def tensor(array: np.ndarray) -> dict:
    return {"dtype": arrays.dtype_name(array), "shape": list(array.shape), "data": array}


def stream(message: dict) -> bytes:
    return b"".join(bytes(buffer) for buffer in encode_message(message))


def read_whole(data: bytes, writable: bool = False) -> dict:
    reader = MessageReader(writable)
    position = 0
    while True:
        target = reader.target()
        count = min(len(target), len(data) - position)
        assert count > 0, "the reader asks for bytes the message does not have"
        target[:count] = data[position : position + count]
        position += count
        message = reader.advance(count)
        if message is not None:
            assert position == len(data)
            return message


def test_a_large_tensor_is_sent_from_its_own_memory_and_a_small_one_inline() -> None:
    buffers = encode_message({"kind": "call", "inputs": [tensor(LARGE), tensor(SMALL)]})
    frames = [
        buffer for buffer in buffers if isinstance(buffer, memoryview) and buffer.nbytes == LARGE.nbytes
    ]
    assert len(frames) == 1 and np.shares_memory(np.asarray(frames[0]), LARGE)
    assert SMALL.tobytes() in bytes(buffers[0])  # the small one rides in the skeleton


def test_the_coordinator_reads_tensors_in_place_read_only_and_with_the_same_bits() -> None:
    left, right = socket.socketpair()
    message = {"kind": "call", "id": 3, "inputs": [tensor(LARGE), tensor(SMALL), tensor(LARGE[::-1] * 2)]}
    writer = threading.Thread(target=send_message, args=(left, message))
    writer.start()
    received = receive_message(right, writable=False)
    writer.join()
    decoded = [arrays.decode(wire_tensor) for wire_tensor in received["inputs"]]
    for array, sent in zip(decoded, [LARGE, SMALL, LARGE[::-1] * 2], strict=True):
        assert array.dtype == sent.dtype and array.tobytes() == sent.tobytes()
        assert not array.flags.writeable and immutable(array)  # kept copies of the World share it
    first, third = received["inputs"][0]["data"], received["inputs"][2]["data"]
    assert first.base is third.base  # one buffer for the message, each tensor a view of it
    assert decoded[0].ctypes.data % 16 == 0 and decoded[2].ctypes.data % 16 == 0  # aligned for any dtype
    assert received["id"] == 3 and received["kind"] == "call"


def test_a_message_without_frames_is_as_before() -> None:
    message = {"kind": "output", "lines": ["a", "b"], "t_ns": 5, "blob": b"x" * (2 * FRAME_BYTES_MIN)}
    assert len(encode_message(message)) == 1  # bytes are never lifted out (a store value stays bytes)
    assert read_whole(stream(message)) == message


def test_a_message_read_one_byte_at_a_time_is_the_same_message() -> None:
    message = {"kind": "step", "state": {"a": tensor(LARGE[:2000]), "b": tensor(SMALL), "c": tensor(LARGE)}}
    data = stream(message)
    reader = MessageReader(writable=False)
    result = None
    for position in range(len(data)):
        target = reader.target()
        assert len(target) > 0
        target[:1] = data[position : position + 1]
        result = reader.advance(1)
        assert (result is None) == (position < len(data) - 1)
    assert result is not None
    assert arrays.decode(result["state"]["c"]).tobytes() == LARGE.tobytes()
    assert arrays.decode(result["state"]["a"]).tobytes() == LARGE[:2000].tobytes()


def test_the_rank_side_gets_writable_frames_and_numpy_sees_the_dtype_of_any_width() -> None:
    values = np.linspace(-1, 1, 5000).astype(np.complex128)
    received = read_whole(stream({"results": {"1": [tensor(values)]}}), writable=True)
    frame = received["results"]["1"][0]["data"]
    assert frame.flags.writeable
    assert np.array_equal(frame.view(np.complex128), values)


def test_the_world_result_is_sent_out_of_band_without_changing_the_world_copy() -> None:
    outputs = [arrays.encode(LARGE, "float32"), arrays.encode(SMALL, "int64")]
    message = {"kind": "result", "t_ns": 9, "results": {"4": outputs, "5": {"value": b"v"}}}
    lifted = arrays.out_of_band(message)
    assert isinstance(message["results"]["4"][0]["data"], bytes)  # the World's own (hashed) form
    assert np.shares_memory(lifted["results"]["4"][0]["data"], np.frombuffer(outputs[0]["data"], np.uint8))
    received = read_whole(stream(lifted), writable=True)
    assert bytes(received["results"]["4"][0]["data"]) == outputs[0]["data"]
    assert received["results"]["4"][1] == outputs[1] and received["results"]["5"] == {"value": b"v"}


# -- limits, checked before reading -----------------------------------------------------------------


def test_a_skeleton_longer_than_the_limit_is_refused_from_the_prefix() -> None:
    reader = MessageReader()
    reader.target()[:8] = struct.pack("<II", MESSAGE_BYTES_MAX + 1, 0)
    with pytest.raises(ProtocolError, match="exceeds"):
        reader.advance(8)


def test_a_frame_count_above_the_limit_is_refused_from_the_prefix() -> None:
    reader = MessageReader()
    reader.target()[:8] = struct.pack("<II", 10, FRAMES_MAX + 1)
    with pytest.raises(ProtocolError, match="frames exceeds"):
        reader.advance(8)


@pytest.mark.parametrize(
    "sizes",
    [[MESSAGE_BYTES_MAX], [0xFFFFFFFF], [MESSAGE_BYTES_MAX // 2, MESSAGE_BYTES_MAX // 2 + 1]],
    ids=["one frame at the limit with the skeleton", "one frame of 4 GiB", "two frames adding up"],
)
def test_frames_larger_than_the_limit_are_refused_from_their_sizes_before_any_allocation(
    sizes: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_allocation(*args: object, **kwargs: object) -> None:
        raise AssertionError("the body was allocated")

    monkeypatch.setattr(wire.np, "empty", no_allocation)
    reader = MessageReader()
    reader.target()[:8] = struct.pack("<II", 16, len(sizes))
    assert reader.advance(8) is None
    table = struct.pack(f"<{len(sizes)}I", *sizes)
    reader.target()[: len(table)] = table
    with pytest.raises(ProtocolError, match="exceeds"):
        reader.advance(len(table))


def hostile(skeleton: object, frames: list[bytes]) -> bytes:
    """A message built by hand: ``skeleton`` packed as is, ``frames`` after it at aligned offsets."""
    body = msgpack.packb(skeleton, use_bin_type=True)
    data = struct.pack("<II", len(body), len(frames)) + struct.pack(f"<{len(frames)}I", *map(len, frames))
    offset = len(body)
    data += body
    for frame in frames:
        start = -(-offset // 64) * 64
        data += bytes(start - offset) + frame
        offset = start + len(frame)
    return data


def placeholder(index: int, code: int = wire.FRAME_CODE) -> msgpack.ExtType:
    return msgpack.ExtType(code, struct.pack("<I", index))


@pytest.mark.parametrize(
    ("skeleton", "frames", "problem"),
    [
        ({"data": placeholder(1)}, [b"a" * 8], "names frame 1 of 1"),
        ({"a": placeholder(0), "b": placeholder(0)}, [b"a" * 8], "names it twice"),
        ({"a": placeholder(0)}, [b"a" * 8, b"b" * 8], "names 1 of its 2 frames"),
        ({"a": placeholder(0, code=7)}, [b"a" * 8], "unknown msgpack ext type 7"),
        ({"a": msgpack.ExtType(wire.FRAME_CODE, b"\x00" * 9)}, [b"a" * 8], "not valid msgpack"),
        ([placeholder(0)], [b"a" * 8], "not a map"),
        ({"kind": placeholder(0)}, [b"a" * 8], "outside a tensor's data \\(at 'kind'\\)"),
        ({"inputs": [placeholder(0)]}, [b"a" * 8], "outside a tensor's data"),
    ],
    ids=[
        "a frame that is not there",
        "a frame named twice",
        "a frame never named",
        "an unknown ext type",
        "a placeholder too long",
        "not a map",
        "a frame as a message's kind",
        "a frame in a list",
    ],
)
def test_a_malformed_frame_reference_is_a_protocol_error(
    skeleton: object, frames: list[bytes], problem: str
) -> None:
    with pytest.raises(ProtocolError, match=problem):
        read_whole(hostile(skeleton, frames))


def test_a_frame_whose_size_does_not_match_its_tensor_is_refused_by_decode() -> None:
    message = read_whole(
        hostile({"t": {"dtype": "float32", "shape": [4], "data": placeholder(0)}}, [b"a" * 12])
    )
    with pytest.raises(arrays.TensorFormatError, match="needs 16 bytes, got 12"):
        arrays.decode(message["t"])


def test_the_sender_refuses_a_message_above_the_limits(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire, "MESSAGE_BYTES_MAX", LARGE.nbytes)
    with pytest.raises(ProtocolError, match="exceeds"):
        encode_message({"data": LARGE, "more": b"x"})
    monkeypatch.setattr(wire, "FRAMES_MAX", 1)
    with pytest.raises(ProtocolError, match="frames exceeds"):
        encode_message({"a": SMALL.repeat(1000), "b": SMALL.repeat(1000)})
    with pytest.raises(ProtocolError, match="cannot be encoded"):
        encode_message({"a": object()})


def test_a_message_of_more_frames_than_one_sendmsg_takes_arrives_whole() -> None:
    pieces = [np.full(FRAME_BYTES_MIN // 4 + index, index, dtype=np.float32) for index in range(1500)]
    left, right = socket.socketpair()
    writer = threading.Thread(
        target=send_message, args=(left, {"parts": [tensor(piece) for piece in pieces]})
    )
    writer.start()
    received = receive_message(right, writable=False)
    writer.join()
    assert all(
        arrays.decode(got).tobytes() == piece.tobytes()
        for got, piece in zip(received["parts"], pieces, strict=True)
    )


# -- the rank side (torch) ------------------------------------------------------------------------


def test_tensor_to_wire_views_a_contiguous_tensor_and_the_result_is_read_in_place() -> None:
    import torch

    from timetravel.torch.rank.backend import tensor_to_wire, wire_to_tensor

    weights = torch.randn(100, 50)
    assert np.shares_memory(tensor_to_wire(weights)["data"], weights.numpy())  # no copy to send
    half = torch.randn(4000).to(torch.bfloat16)
    flags = torch.tensor([True, False, True])
    received = read_whole(
        stream({"r": [tensor_to_wire(t) for t in (weights, half, flags, weights.t())]}), True
    )
    values = [wire_to_tensor(entry) for entry in received["r"]]
    assert torch.equal(values[0], weights) and torch.equal(values[1], half) and torch.equal(values[2], flags)
    assert torch.equal(values[3], weights.t().contiguous())  # a non-contiguous tensor is sent in C order
    assert values[0].data_ptr() == received["r"][0]["data"].ctypes.data  # over the message's buffer
    assert values[1].dtype == torch.bfloat16 and values[1].data_ptr() == received["r"][1]["data"].ctypes.data
    inline = wire_to_tensor(received["r"][2])  # inline bytes are read-only: a copy of its own
    inline[0] = False
    assert torch.equal(wire_to_tensor(received["r"][2]), flags)
