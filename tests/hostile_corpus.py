"""A generator of hostile recordings: what an attacker (or a broken disk) could hand a user.

Every file is made from a real recording by rewriting its frames, and every forged frame gets
valid checksums, so the reader's checksum layer lets it through and the layers behind it (sizes,
schema, structure, replay verification) are what is tested. The kinds:

* truncation and byte flips (caught by the checksum layer, kept as a control);
* frame swaps and drops (EVENTS frames out of order, missing, duplicated) with and without index;
* forged frames with valid checksums (edited events, a forged FAILURE, wrong-typed fields);
* bombs: zstd frames that declare (or do not declare) a huge content size, many big NOTEs,
  containers of millions of empty lists.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgpack
import zstandard

from timetravel.recording.format import (
    FLAG_ZSTD,
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    MAGIC,
    TRAILER_BYTES,
    TRAILER_MAGIC,
    FrameType,
    pack_frame_header,
    pack_trailer,
    payload_checksum,
)
from timetravel.sim.encoding import pack

ZSTD_BLOCK_BYTES = 128 * 1024


@dataclass
class Frame:
    """One frame: its type and either its payload map or raw stored bytes (for bombs)."""

    frame_type: int
    payload: dict[str, Any] | None = None
    stored: bytes | None = None
    raw_length: int | None = None
    flags: int = FLAG_ZSTD


def read_frames(path: Path) -> list[Frame]:
    """The frames of a recording, decoded (the INDEX and trailer left out)."""
    data = path.read_bytes()
    if data[-TRAILER_BYTES + 8 : -TRAILER_BYTES + 12] == TRAILER_MAGIC:
        data = data[:-TRAILER_BYTES]
    offset = len(MAGIC)
    frames = []
    while offset + FRAME_HEADER_BYTES <= len(data):
        _marker, frame_type, flags, stored, _raw, _check, _hcheck = FRAME_HEADER.unpack_from(data, offset)
        body = data[offset + FRAME_HEADER_BYTES : offset + FRAME_HEADER_BYTES + stored]
        if flags & FLAG_ZSTD:
            body = zstandard.ZstdDecompressor().decompress(body)
        if frame_type != FrameType.INDEX:
            frames.append(Frame(frame_type, msgpack.unpackb(body, raw=False, strict_map_key=False)))
        offset += FRAME_HEADER_BYTES + stored
    return frames


def encode_frame(frame: Frame) -> bytes:
    """A frame with valid header and payload checksums, whatever it holds."""
    if frame.stored is not None:
        stored = frame.stored
        raw_length = frame.raw_length if frame.raw_length is not None else len(stored)
        flags = frame.flags
    else:
        raw = msgpack.packb(frame.payload, use_bin_type=True)
        stored = zstandard.ZstdCompressor(write_content_size=True).compress(raw)
        raw_length, flags = len(raw), FLAG_ZSTD
    return (
        pack_frame_header(frame.frame_type, flags, len(stored), raw_length, payload_checksum(stored)) + stored
    )


def write_frames(path: Path, frames: list[Frame], *, index: bool = False) -> Path:
    """Write frames as a recording; ``index``: with an INDEX frame and trailer built like the writer's."""
    from timetravel.recording.catalog import Catalog

    body = bytearray(MAGIC)
    catalog = Catalog()
    for frame in frames:
        offset = len(body)
        body += encode_frame(frame)
        if index and frame.payload is not None:
            catalog.add(offset, frame.frame_type, frame.payload)
    if index:
        index_offset = len(body)
        body += encode_frame(Frame(FrameType.INDEX, catalog.to_index()))
        body += pack_trailer(index_offset)
    path.write_bytes(bytes(body))
    return path


def zstd_rle(total_bytes: int, *, declare_size: bool) -> bytes:
    """A zstd frame of ``total_bytes`` zero bytes made of RLE blocks (4 bytes a 128 KiB block), with or
    without a declared content size: a decompression bomb of any size in a few kilobytes."""
    if declare_size:
        # Frame header descriptor: FCS field 8 bytes (bits 7-6 = 3), single segment (bit 5).
        header = b"\x28\xb5\x2f\xfd" + bytes([0b1110_0000]) + struct.pack("<Q", total_bytes)
    else:
        # No content size, not single segment: a window descriptor (1 MiB window).
        header = b"\x28\xb5\x2f\xfd" + bytes([0b0000_0000]) + bytes([(20 - 10) << 3])
    blocks = bytearray()
    remaining = total_bytes
    while remaining > 0:
        size = min(remaining, ZSTD_BLOCK_BYTES)
        remaining -= size
        last = 1 if remaining == 0 else 0
        block_header = last | (1 << 1) | (size << 3)
        blocks += struct.pack("<I", block_header)[:3] + b"\x00"
    return header + bytes(blocks)


def bomb_frame(frame_type: int, total_bytes: int, *, declare_size: bool, raw_length: int = 1024) -> Frame:
    return Frame(frame_type, stored=zstd_rle(total_bytes, declare_size=declare_size), raw_length=raw_length)


def compressed_frame(frame_type: int, payload_raw: bytes) -> Frame:
    """A frame whose payload is the given msgpack bytes (honestly sized: only its content is hostile)."""
    stored = zstandard.ZstdCompressor(write_content_size=True).compress(payload_raw)
    return Frame(frame_type, stored=stored, raw_length=len(payload_raw))


def events_positions(frames: list[Frame]) -> list[int]:
    return [i for i, frame in enumerate(frames) if frame.frame_type == FrameType.EVENTS]


def first_of(frames: list[Frame], frame_type: int) -> int:
    return next(i for i, frame in enumerate(frames) if frame.frame_type == frame_type)


def corpus(source: Path, folder: Path) -> Iterator[tuple[str, Path]]:
    """(name, path) of every hostile file made from the recording ``source``."""
    folder.mkdir(parents=True, exist_ok=True)
    data = source.read_bytes()
    frames = read_frames(source)
    header = first_of(frames, FrameType.HEADER)

    def variant(name: str, changed: list[Frame], *, index: bool = False) -> tuple[str, Path]:
        return name, write_frames(folder / f"{name}.ttr", changed, index=index)

    def edited(position: int, **fields: Any) -> list[Frame]:
        copy = list(frames)
        payload = dict(copy[position].payload or {})
        for key, value in fields.items():
            if value is _DELETE:
                payload.pop(key, None)
            else:
                payload[key] = value
        copy[position] = Frame(copy[position].frame_type, payload)
        return copy

    # Controls: truncation and byte flips (the checksum layer).
    for fraction in (0.3, 0.7):
        cut = folder / f"truncated-{fraction}.ttr"
        cut.write_bytes(data[: int(len(data) * fraction)])
        yield f"truncated-{fraction}", cut
    for position in (40, len(data) // 2):
        flipped = bytearray(data)
        flipped[position] ^= 0x10
        path = folder / f"flip-{position}.ttr"
        path.write_bytes(bytes(flipped))
        yield f"flip-{position}", path

    # Structure: EVENTS frames dropped, swapped, duplicated (with and without an index).
    events = events_positions(frames)
    if len(events) >= 3:
        dropped = [frame for i, frame in enumerate(frames) if i != events[1]]
        yield variant("events-dropped", dropped)
        yield variant("events-dropped-indexed", dropped, index=True)
        swapped = list(frames)
        swapped[events[0]], swapped[events[1]] = swapped[events[1]], swapped[events[0]]
        yield variant("events-swapped", swapped)
        duplicated = list(frames)
        duplicated.insert(events[1] + 1, frames[events[1]])
        yield variant("events-duplicated", duplicated)
        yield variant("events-first-negative", edited(events[0], first=-5))
        yield variant("events-first-huge", edited(events[0], first=2**63))
        yield variant("events-count-string", edited(events[0], count="x"))
        # Forged event bytes: the recorded digest stays, the events change (checksums valid).
        forged = frames[events[1]].payload or {}
        events_bytes = forged["events"]
        decoded = msgpack.unpackb(events_bytes, raw=False)
        decoded[0][0] = decoded[0][0] + 1
        yield variant("events-forged", edited(events[1], events=pack(decoded)))
        yield variant("events-as-string", edited(events[1], events="not bytes"))

    # Wrong values in well-formed frames.
    yield variant("header-chain-batch-zero", edited(header, chain_batch_events=0))
    yield variant("header-chain-batch-string", edited(header, chain_batch_events="x"))
    yield variant("header-snapshot-every-string", edited(header, snapshot_every_events="x"))
    yield variant("header-snapshot-quiet-negative", edited(header, snapshot_quiet_ns=-1))
    yield variant("header-branch-key-string", edited(header, branch_key="x"))
    yield variant("header-seed-huge", edited(header, seed=2**64 - 1))
    end = first_of(frames, FrameType.END)
    yield variant("end-without-events", edited(end, events=_DELETE))
    yield variant("end-events-string", edited(end, events="many"))
    yield variant(
        "end-outcome-forged",
        edited(end, outcome="fail" if (frames[end].payload or {}).get("outcome") == "pass" else "pass"),
    )
    manifests = [i for i, frame in enumerate(frames) if frame.frame_type == FrameType.MANIFEST]
    yield variant("manifest-events-negative", edited(manifests[-1], events=-1))
    failure = {
        "kind": "assertion",
        "node": "n0",
        "t_ns": 5,
        "message": "forged",
        "signature": "assertion:forged",
    }
    with_failure = list(frames)
    with_failure.insert(end, Frame(FrameType.FAILURE, {"branch": "main", "event": 3, "failure": failure}))
    yield variant("failure-forged", with_failure)

    # Bombs.
    bombed = list(frames)
    bombed.insert(end, bomb_frame(FrameType.NOTE, 2**31, declare_size=True))
    yield variant("bomb-declared", bombed)
    bombed = list(frames)
    bombed.insert(end, bomb_frame(FrameType.NOTE, 64 * 2**30, declare_size=True))
    yield variant("bomb-declared-64g", bombed)
    bombed = list(frames)
    bombed.insert(end, bomb_frame(FrameType.NOTE, 2**31, declare_size=False))
    yield variant("bomb-undeclared", bombed)
    bombed = list(frames)
    bombed.insert(end, bomb_frame(FrameType.EVENTS, 200 * 2**20, declare_size=True, raw_length=200 * 2**20))
    yield variant("bomb-events-honest-size", bombed)
    many_notes = list(frames)
    big_note = msgpack.packb({"branch": "main", "level": "warning", "message": "x" * (200 * 2**20)})
    for _ in range(4):
        many_notes.insert(end, compressed_frame(FrameType.NOTE, big_note))
    yield variant("notes-huge", many_notes)
    empty_lists = b"\x81\xa7entries\xdd" + struct.pack(">I", 20_000_000) + b"\x90" * 20_000_000
    listed = list(frames)
    listed.insert(end, compressed_frame(FrameType.CHOICES, empty_lists))
    yield variant("empty-lists", listed)
    shape = msgpack.packb(["uint8", [0, 2**63], b""], use_bin_type=True)
    array = msgpack.packb(
        {"branch": "main", "level": "warning", "message": msgpack.ExtType(1, shape)}, use_bin_type=True
    )
    arrayed = list(frames)
    arrayed.insert(end, compressed_frame(FrameType.NOTE, array))
    yield variant("array-shape-huge", arrayed)

    # Nesting (issue 32 item 9): lists 1,000 deep where a field, a note and the events are.
    nested = list(frames)
    nested[header] = nested_field_frame(FrameType.HEADER, frames[header].payload or {}, "seed", 1000)
    yield variant("nested-header-1000", nested)
    nested = list(frames)
    note = {"branch": "main", "level": "warning"}
    nested.insert(end, nested_field_frame(FrameType.NOTE, note, "message", 1000))
    yield variant("nested-note-1000", nested)
    if events:
        yield variant("nested-events-1000", edited(events[0], events=NESTED_LIST_1 * 1000 + b"\x01"))


NESTED_LIST_1 = b"\x91"
"""msgpack's one-element array header: N of them, then a value, nest it N lists deep (msgpack's
own packer refuses to write more than 511 levels, so the bytes are written by hand)."""


def nested_field_frame(frame_type: int, payload: dict[str, Any], field: str, depth: int) -> Frame:
    """A frame whose payload is ``payload`` with ``field`` set to a list nested ``depth`` deep."""
    others = {key: value for key, value in payload.items() if key != field}
    raw = b"\xde" + struct.pack(">H", len(others) + 1)  # map 16: any count, however small
    raw += b"".join(pack(key) + pack(value) for key, value in others.items())
    raw += pack(field) + NESTED_LIST_1 * depth + b"\x01"
    return compressed_frame(frame_type, raw)


class _Delete:
    pass


_DELETE = _Delete()


TERMINAL_ESCAPES = "\x1b]0;PWNED\x07\x1b[2J\x9b31m\u202e"
"""Retitles the terminal, clears it, a C1 CSI, and a right-to-left override."""


def with_terminal_escapes(source: Path, path: Path) -> tuple[Path, str]:
    """``source`` (a recording with a branch ``b1`` and a failing main) with TERMINAL_ESCAPES in
    every text a front end shows: the branch's name and changes, the failure's message, node and
    signature, and a NOTE. Returns the file and the branch's new name."""
    frames = read_frames(source)
    name = f"b1{TERMINAL_ESCAPES}"
    for frame in frames:
        payload = frame.payload or {}
        if payload.get("branch") == "b1":
            payload["branch"] = name
        if frame.frame_type == FrameType.BRANCH:
            payload.update(name=name, changes=[f"changed{TERMINAL_ESCAPES}"])
        failure = payload.get("failure")
        if isinstance(failure, dict):
            failure.update(
                message=f"failed{TERMINAL_ESCAPES}",
                node=f"{failure['node']}{TERMINAL_ESCAPES}",
                signature=f"{failure['signature']}{TERMINAL_ESCAPES}",
            )
    note = {"branch": "main", "level": "warning", "message": f"note{TERMINAL_ESCAPES}"}
    frames.insert(first_of(frames, FrameType.END), Frame(FrameType.NOTE, note))
    return write_frames(path, frames), name
