"""The zygote's pipe protocol: length-prefixed msgpack frames between the coordinator and the zygote.

The coordinator writes a rank's spec (plain data) to the zygote's stdin; the zygote answers on its
stdout (``{"ready": ...}`` once, then ``{"pid": ...}`` per fork). A frame is bounded before it is read.
"""

from __future__ import annotations

import struct
from typing import Any, BinaryIO

import msgpack

_LENGTH = struct.Struct("<I")
REQUEST_BYTES_MAX = 16 * 1024 * 1024


def read_frame(stream: BinaryIO) -> Any:
    header = stream.read(4)
    if len(header) < 4:
        return None
    length = _LENGTH.unpack(header)[0]
    if length > REQUEST_BYTES_MAX:
        raise ValueError(f"zygote request of {length} bytes exceeds {REQUEST_BYTES_MAX}")
    return msgpack.unpackb(stream.read(length), raw=False)


def write_frame(stream: BinaryIO, value: Any) -> None:
    body = msgpack.packb(value, use_bin_type=True)
    stream.write(_LENGTH.pack(len(body)) + body)
    stream.flush()
