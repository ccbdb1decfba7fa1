"""The wire between a rank process and the coordinator: length-prefixed msgpack, tensors as raw bytes.

A message is a dict of plain data. A tensor travels as ``{"dtype": name, "shape": [...], "data": bytes}``
so that the coordinator, which holds the World, never needs torch: it reads the bytes with numpy.
Nothing here is pickle: a rank cannot make the coordinator run code, and a length is checked against
:data:`MESSAGE_BYTES_MAX` before a byte of the body is read.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import msgpack

from timetravel.torch.limits import MESSAGE_BYTES_MAX, MESSAGE_HEADER_BYTES

_LENGTH = struct.Struct("<I")


class ChannelClosed(ConnectionError):
    """The other side closed the connection (the rank died or the coordinator went away)."""


class ProtocolError(ValueError):
    """A message that breaks the wire format (too long, not msgpack, not a dict)."""


def encode_message(message: dict[str, Any]) -> tuple[bytes, bytes]:
    """(header, body) of ``message`` as the wire carries it (the body checked against the limit)."""
    body = msgpack.packb(message, use_bin_type=True)
    if len(body) > MESSAGE_BYTES_MAX:
        raise ProtocolError(f"message of {len(body):,} bytes exceeds {MESSAGE_BYTES_MAX:,}")
    return _LENGTH.pack(len(body)), body


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    _header, body = encode_message(message)
    sock.sendall(_LENGTH.pack(len(body)) + body if len(body) < 65536 else _LENGTH.pack(len(body)))
    if len(body) >= 65536:
        sock.sendall(body)


def receive_message(sock: socket.socket) -> dict[str, Any]:
    length = message_length(_receive_exactly(sock, MESSAGE_HEADER_BYTES))
    return decode_message(_receive_exactly(sock, length))


def message_length(header: bytes | bytearray) -> int:
    """The body length a message's header announces, checked against the limit."""
    length = int(_LENGTH.unpack(header)[0])
    if length > MESSAGE_BYTES_MAX:
        raise ProtocolError(f"message length {length:,} exceeds {MESSAGE_BYTES_MAX:,}")
    return length


def decode_message(body: bytes | bytearray | memoryview) -> dict[str, Any]:
    """A message's body as the dict it must be (a ProtocolError otherwise)."""
    try:
        message = msgpack.unpackb(body, raw=False, strict_map_key=True, max_bin_len=MESSAGE_BYTES_MAX)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
        raise ProtocolError(f"message is not valid msgpack: {error}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"message is a {type(message).__name__}, not a map")
    return message


def _receive_exactly(sock: socket.socket, count: int) -> bytes:
    view = memoryview(bytearray(count))
    received = 0
    while received < count:
        chunk = sock.recv_into(view[received:], count - received)
        if chunk == 0:
            raise ChannelClosed("the other side closed the channel")
        received += chunk
    return view.tobytes()
