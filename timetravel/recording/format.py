"""The .ttr recording format: constants, the frame header, and the one error type of this layer.

A recording is ``MAGIC``, then frames, then (when the writer closed cleanly) a ``TRAILER``
pointing at the INDEX frame. Every frame is a 24-byte header followed by its payload::

    offset size field
    0      2    marker          b"TF"
    2      1    frame type      FrameType
    3      1    flags           bit 0: payload is zstd-compressed
    4      4    stored length   bytes of payload that follow (u32, little-endian)
    8      4    raw length      bytes of the payload once decompressed (u32)
    12     8    payload check   xxh3-64 of the stored payload (u64)
    20     4    header check    low 32 bits of xxh3-64 of bytes 0..19 (u32)

The payload, once decompressed, is one msgpack map (``timetravel.sim.encoding``: arrays as an
extension holding an allow-listed dtype name). docs/recording-format.md is the full specification.
"""

from __future__ import annotations

import enum
import struct

import xxhash

MAGIC = b"\x89TTR\r\n\x1a\n"
"""First 8 bytes of every recording (PNG-style: catches text-mode and truncation damage)."""
FORMAT_VERSION = (1, 3)
"""(major, minor). A reader opens files of its own major version; minors only add map keys and
frame types, which older readers ignore. 1.2: an array's pages may be absent (the array is elided:
a torch recording keeps large tensors as digests, rebuilt by re-execution); JOURNAL frames (what a
run's processes handed its World: a torch run re-executes from them without its ranks). 1.3: a
manifest names the open chain batch's events by chunk blobs instead of holding them (a 1.2 reader
cannot restore such a snapshot; this one reads both: recording/open_batch.py)."""
SCENARIO_FORMAT_MIN = {"torch": (1, 2)}
"""Scenarios whose recordings of an older format this version refuses, and from which format on it
reads them: a torch recording before 1.2 stores its tensors inside the World's state and events in a
layout this version no longer runs (docs/recording-format.md, "Compatibility rule")."""
FRAME_MARKER = b"TF"
FRAME_HEADER = struct.Struct("<2sBBIIQI")
FRAME_HEADER_BYTES = FRAME_HEADER.size
TRAILER = struct.Struct("<Q4sI")
TRAILER_MAGIC = b"TTRX"
TRAILER_BYTES = TRAILER.size
FLAG_ZSTD = 1

FRAME_STORED_BYTES_MAX = 256 * 1024 * 1024
"""No frame payload is larger than this on disk (a larger length field is corruption)."""
FRAME_RAW_BYTES_MAX = 256 * 1024 * 1024
"""No payload decompresses to more than this: the cap against decompression bombs."""
BLOB_FRAME_BYTES = 1024 * 1024
"""Blobs are grouped into frames of about this many raw bytes, so reading one page for a seek
decompresses at most about a megabyte."""
RECORDING_SUFFIX = ".ttr"
RECORDINGS_FOLDER_DEFAULT = "recordings"


class FrameType(enum.IntEnum):
    HEADER = 1
    EVENTS = 2
    BLOBS = 3
    MANIFEST = 4
    CHOICES = 5
    FAILURE = 6
    BRANCH = 7
    END = 8
    INDEX = 9
    NOTE = 10
    JOURNAL = 11


KNOWN_FRAME_TYPES = frozenset(int(kind) for kind in FrameType)

BLOB_VALUE = 0
"""A value in hash form (a node state, a part, a queue generation, a metric chunk)."""
BLOB_ARRAY = 1
"""An array header: msgpack [dtype name, shape, [page digests]]; its digest is the array digest."""
BLOB_PAGE = 2
"""A page of array bytes, encoded by ``snapshot.codec.encode_page``."""
BLOB_KINDS = (BLOB_VALUE, BLOB_ARRAY, BLOB_PAGE)
DIGEST_BYTES = 16


class RecordingError(Exception):
    """A recording that cannot be read as it should: the message names the frame and byte offset."""


def header_checksum(header_start: bytes) -> int:
    return xxhash.xxh3_64_intdigest(header_start) & 0xFFFFFFFF


def payload_checksum(payload: bytes) -> int:
    return xxhash.xxh3_64_intdigest(payload)


def pack_frame_header(
    frame_type: int, flags: int, stored_length: int, raw_length: int, checksum: int
) -> bytes:
    start = FRAME_HEADER.pack(FRAME_MARKER, frame_type, flags, stored_length, raw_length, checksum, 0)[:20]
    return start + struct.pack("<I", header_checksum(start))


def pack_trailer(index_offset: int) -> bytes:
    start = struct.pack("<Q4s", index_offset, TRAILER_MAGIC)
    return start + struct.pack("<I", header_checksum(start))


def frame_name(frame_type: int) -> str:
    try:
        return FrameType(frame_type).name
    except ValueError:
        return f"type-{frame_type}"
