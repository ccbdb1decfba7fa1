"""The wire between a rank process and the coordinator: a msgpack skeleton, tensors' bytes out of band.

A message is a dict of plain data. A tensor travels as ``{"dtype": name, "shape": [...], "data": ...}``
so that the coordinator, which holds the World, never needs torch: it reads the bytes with numpy.
Nothing here is pickle: a rank cannot make the coordinator run code.

Tensors are most of what crosses (a 1 MB gradient bucket per collective, a rank's whole training state
at its optimizer steps), so their bytes are never copied into the msgpack body. A sender puts a numpy
array where the bytes go (``data``); from ``FRAME_BYTES_MIN`` bytes on it travels as a *frame*: the
skeleton holds a placeholder (msgpack ext type ``FRAME_CODE``, the frame's index) and the frame's own
memory is handed to ``sendmsg`` after the skeleton, never concatenated. On the stream::

    u32 skeleton bytes | u32 frame count | u32 size of each frame | skeleton | pad | frame 0 | pad | ...

each frame padded to start at a multiple of ``FRAME_ALIGN_BYTES`` after the skeleton's start. The
receiver reads the skeleton and the frames into one buffer it allocates once, and each placeholder
becomes a uint8 array over its frame in that buffer: ``arrays.decode`` and the rank's results read it
in place, with no copy (read-only on the coordinator, so the World's arrays are immutable as bytes
were). Every count is checked before anything it announces is read or allocated: the skeleton and the
frame count first, then each frame's size and the total against ``MESSAGE_BYTES_MAX``; a placeholder
naming no frame, a frame named twice or never or anywhere but as a ``data`` value, an unknown ext
type — a :class:`ProtocolError`.

A send owns nothing: ``send_message`` returns once the kernel has every byte, so a frame may be a
view of a live tensor only because nothing runs on the rank between the encoding and that moment.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import msgpack
import numpy as np

from timetravel.torch.protocol.limits import (
    FRAME_ALIGN_BYTES,
    FRAME_BYTES_MIN,
    FRAMES_MAX,
    MESSAGE_BYTES_MAX,
    MESSAGE_HEADER_BYTES,
)

FRAME_CODE = 1
"""The msgpack ext type of a frame's placeholder; its 4 bytes are the frame's index (little-endian)."""
_PREFIX = struct.Struct("<II")
_INDEX = struct.Struct("<I")
_PADDING = bytes(FRAME_ALIGN_BYTES)
BUFFERS_PER_SEND_MAX = 1024
"""Buffers handed to one ``sendmsg`` (Linux's IOV_MAX): a message of more frames takes several."""

assert _PREFIX.size == MESSAGE_HEADER_BYTES


class ChannelClosed(ConnectionError):
    """The other side closed the connection (the rank died or the coordinator went away)."""


class ProtocolError(ValueError):
    """A message that breaks the wire format (too long, not msgpack, not a dict, a bad frame)."""


def _aligned(offset: int) -> int:
    return -(-offset // FRAME_ALIGN_BYTES) * FRAME_ALIGN_BYTES


def encode_message(message: dict[str, Any]) -> list[bytes | memoryview]:
    """The buffers that carry ``message``, to be sent in order (one when it has no frames).

    A numpy array anywhere in the message is its bytes in C order: inline below ``FRAME_BYTES_MIN``,
    a frame from there on (a view of the array's own memory when it is C-contiguous)."""
    frames: list[memoryview] = []

    def lift(value: Any) -> Any:
        if not isinstance(value, np.ndarray):
            raise TypeError(f"a {type(value).__name__} cannot travel on the wire")
        if value.nbytes < FRAME_BYTES_MIN:
            return value.tobytes()
        flat = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
        frames.append(memoryview(flat))  # type: ignore[arg-type]  # (numpy's stubs lack the buffer protocol)
        return msgpack.ExtType(FRAME_CODE, _INDEX.pack(len(frames) - 1))

    try:
        skeleton = msgpack.packb(message, use_bin_type=True, default=lift)
    except TypeError as error:
        raise ProtocolError(f"message cannot be encoded: {error}") from None
    if len(frames) > FRAMES_MAX:
        raise ProtocolError(f"message of {len(frames):,} frames exceeds {FRAMES_MAX:,}")
    sizes = [frame.nbytes for frame in frames]
    total = _body_bytes(len(skeleton), sizes)
    if total > MESSAGE_BYTES_MAX:
        raise ProtocolError(f"message of {total:,} bytes exceeds {MESSAGE_BYTES_MAX:,}")
    head = _PREFIX.pack(len(skeleton), len(frames)) + struct.pack(f"<{len(sizes)}I", *sizes) + skeleton
    buffers: list[bytes | memoryview] = [head]
    offset = len(skeleton)
    for frame in frames:
        start = _aligned(offset)
        if start > offset:
            buffers.append(memoryview(_PADDING)[: start - offset])
        buffers.append(frame)
        offset = start + frame.nbytes
    return buffers


def _body_bytes(skeleton_bytes: int, sizes: list[int]) -> int:
    """The receiver's buffer: the skeleton, then each frame at its aligned offset."""
    offset = skeleton_bytes
    for size in sizes:
        offset = _aligned(offset) + size
    return offset


class Outgoing:
    """A message's buffers being written, possibly a little at a time (``inbox.send``)."""

    def __init__(self, buffers: list[bytes | memoryview]) -> None:
        self.buffers = [memoryview(buffer) for buffer in buffers]
        self.next = 0

    def done(self) -> bool:
        return self.next >= len(self.buffers)

    def send(self, sock: socket.socket, flags: int = 0) -> int:
        """One ``sendmsg`` of what is left (raises BlockingIOError under MSG_DONTWAIT when full)."""
        sent = sock.sendmsg(self.buffers[self.next : self.next + BUFFERS_PER_SEND_MAX], [], flags)
        left = sent
        while left and not self.done():
            current = self.buffers[self.next]
            if left < current.nbytes:
                self.buffers[self.next] = current[left:]
                break
            left -= current.nbytes
            self.next += 1
        while not self.done() and self.buffers[self.next].nbytes == 0:
            self.next += 1
        return sent


def send_message(sock: socket.socket, message: dict[str, Any]) -> None:
    """Write ``message`` whole (blocking); its frames' memory is read by the kernel, never copied here."""
    buffers = encode_message(message)
    if len(buffers) == 1:
        sock.sendall(buffers[0])
        return
    outgoing = Outgoing(buffers)
    while not outgoing.done():
        outgoing.send(sock)


def receive_message(sock: socket.socket, writable: bool = True) -> dict[str, Any]:
    """The next message on a blocking socket (frames writable unless ``writable`` is False)."""
    reader = MessageReader(writable)
    while True:
        count = sock.recv_into(reader.target())
        if count == 0:
            raise ChannelClosed("the other side closed the channel")
        message = reader.advance(count)
        if message is not None:
            return message


class MessageReader:
    """One message read in pieces, as they arrive: the prefix, the frame sizes, then the body.

    :meth:`target` is where the next bytes go (never empty), :meth:`advance` says how many came and
    returns the message once it is whole. Every count is checked as soon as it is complete, before
    the part it announces is allocated or read."""

    def __init__(self, writable: bool = False) -> None:
        self.writable = writable
        self.buffer: Any = bytearray(MESSAGE_HEADER_BYTES)
        self.filled = 0
        self.stage = "prefix"
        self.skeleton_bytes = 0
        self.sizes: list[int] = []

    def idle(self) -> bool:
        return self.stage == "prefix" and self.filled == 0

    def target(self) -> memoryview:
        return memoryview(self.buffer)[self.filled :]

    def advance(self, count: int) -> dict[str, Any] | None:
        self.filled += count
        if self.filled < len(self.buffer):
            return None
        if self.stage == "prefix":
            self.skeleton_bytes, frames = _PREFIX.unpack(self.buffer)
            if self.skeleton_bytes > MESSAGE_BYTES_MAX:
                raise ProtocolError(f"message length {self.skeleton_bytes:,} exceeds {MESSAGE_BYTES_MAX:,}")
            if frames > FRAMES_MAX:
                raise ProtocolError(f"message of {frames:,} frames exceeds {FRAMES_MAX:,}")
            if frames:
                self._start("sizes", bytearray(frames * _INDEX.size))
                return None
            return self._start_body()
        if self.stage == "sizes":
            self.sizes = list(struct.unpack(f"<{len(self.buffer) // _INDEX.size}I", self.buffer))
            return self._start_body()
        return self._decode()

    def _start(self, stage: str, buffer: Any) -> None:
        self.stage, self.buffer, self.filled = stage, buffer, 0

    def _start_body(self) -> dict[str, Any] | None:
        total = _body_bytes(self.skeleton_bytes, self.sizes)
        if total > MESSAGE_BYTES_MAX:
            raise ProtocolError(f"message of {total:,} bytes exceeds {MESSAGE_BYTES_MAX:,}")
        # with frames, numpy's buffer: not zero-filled (the kernel writes every byte of it)
        self._start("body", np.empty(total, dtype=np.uint8) if self.sizes else bytearray(total))
        return self._decode() if total == 0 else None

    def _decode(self) -> dict[str, Any]:
        body = self.buffer
        frames: list[np.ndarray] = []
        if self.sizes:
            body.flags.writeable = self.writable
            offset = self.skeleton_bytes
            for size in self.sizes:
                start = _aligned(offset)
                frames.append(body[start : start + size])
                offset = start + size
        with memoryview(body) as view:
            return decode_message(view[: self.skeleton_bytes], frames)


def decode_message(
    skeleton: bytes | bytearray | memoryview, frames: list[Any] | None = None
) -> dict[str, Any]:
    """A message's skeleton, its placeholders replaced by ``frames``, as the dict it must be."""
    frames = frames or []
    used: set[int] = set()

    def frame(code: int, data: bytes) -> Any:
        if code != FRAME_CODE or len(data) != _INDEX.size:
            raise ProtocolError(f"message holds an unknown msgpack ext type {code}")
        index = _INDEX.unpack(data)[0]
        if index >= len(frames) or index in used:
            raise ProtocolError(f"message names frame {index} of {len(frames)} (or names it twice)")
        used.add(index)
        return frames[index]

    try:
        message = msgpack.unpackb(
            skeleton,
            raw=False,
            strict_map_key=True,
            max_bin_len=MESSAGE_BYTES_MAX,
            max_ext_len=_INDEX.size,
            ext_hook=frame,
        )
    except ProtocolError:
        raise
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as error:
        raise ProtocolError(f"message is not valid msgpack: {error}") from None
    if not isinstance(message, dict):
        raise ProtocolError(f"message is a {type(message).__name__}, not a map")
    if len(used) != len(frames):
        raise ProtocolError(f"message names {len(used)} of its {len(frames)} frames")
    if frames:
        _check_placement(message)
    return message


def _check_placement(value: Any, key: Any = None) -> None:
    """A frame may only be a tensor's ``data``: anywhere else (a kind, a rank, a list) it would reach
    code that expects plain data, so the message is malformed."""
    if isinstance(value, dict):
        for name, item in value.items():
            _check_placement(item, name)
    elif isinstance(value, list):
        for item in value:
            _check_placement(item)
    elif isinstance(value, np.ndarray) and key != "data":
        raise ProtocolError(f"message holds a frame outside a tensor's data (at {key!r})")
