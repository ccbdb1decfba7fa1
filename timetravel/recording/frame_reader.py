"""A .ttr's frames, read as untrusted input: the file, its catalog, and one checked frame at a time.

The lower half of :class:`~timetravel.recording.reader.RecordingReader` (blob_reader.py adds the
values, arrays and pages the frames hold, reader.py the events, snapshots and restores); reader.py's
module docstring says the rules all follow.
Here: the magic and the header; the index and its offsets, or a scan of the frames when the trailer is
missing (``truncation`` says where the file stops); every frame header's own checksum and every
payload's xxh3-64; lengths capped from the header (FRAME_STORED_BYTES_MAX, each frame type's
``raw_bytes_max``) and charged against ``recording_bytes_max`` before anything is decompressed or
decoded; the payload checked against its frame type's field table (schema.py).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Self

from timetravel.recording.catalog import Catalog
from timetravel.recording.decompress import DecompressError, decompress
from timetravel.recording.files import open_regular
from timetravel.recording.format import (
    FLAG_ZSTD,
    FORMAT_VERSION,
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    FRAME_MARKER,
    FRAME_RAW_BYTES_MAX,
    FRAME_STORED_BYTES_MAX,
    MAGIC,
    SCENARIO_FORMAT_MIN,
    TRAILER,
    TRAILER_BYTES,
    TRAILER_MAGIC,
    FrameType,
    RecordingError,
    frame_name,
    header_checksum,
    payload_checksum,
)
from timetravel.recording.lock import is_being_written
from timetravel.recording.schema import check_payload, schema_for
from timetravel.sim.encoding import DecodeError, unpack

UNCOUNTED_DECODE_BYTES_MAX = 1024 * 1024
"""Payloads, event batches and values up to this size decode without counting their items: at
worst (an empty list is 1 msgpack byte and 64 bytes of Python) one is 64 MiB, and counting costs
~40% of an event batch's decode (3.8 -> 5.3 ms for 4,096 gossip events, noisy shared machine)."""


def items_max_for(data_bytes: int, items_max: int) -> int | None:
    return items_max if data_bytes > UNCOUNTED_DECODE_BYTES_MAX else None


RECORDING_BYTES_MAX_DEFAULT = 4 * 1024 * 1024 * 1024
"""``recording_bytes_max``: the decoded bytes of all distinct frames one open recording may hold.
Each frame is charged once, when it is first decompressed (re-reads from the caches and re-decodes
of a frame are free), before the work is done. It bounds what a small file of highly compressible
frames can make the reader decompress (time, not memory: the caches bound memory). A real
recording decodes to ~5x its size on disk; set TIMETRAVEL_RECORDING_BYTES_MAX (bytes) for more."""
RECORDING_BYTES_MAX_VARIABLE = "TIMETRAVEL_RECORDING_BYTES_MAX"


def recording_bytes_max_default() -> int:
    """RECORDING_BYTES_MAX_DEFAULT, or the TIMETRAVEL_RECORDING_BYTES_MAX environment variable."""
    text = os.environ.get(RECORDING_BYTES_MAX_VARIABLE, "").strip()
    if not text:
        return RECORDING_BYTES_MAX_DEFAULT
    try:
        value = int(text.replace("_", ""))
    except ValueError:
        raise RecordingError(f"{RECORDING_BYTES_MAX_VARIABLE}={text!r} is not a number of bytes") from None
    if value < 1:
        raise RecordingError(f"{RECORDING_BYTES_MAX_VARIABLE} must be at least 1 byte")
    return value


class FrameReader:
    """An open recording's file and frames. Use :meth:`open`; close it (or use ``with``) when done."""

    def __init__(self, path: Path, file: IO[bytes], recording_bytes_max: int | None = None) -> None:
        self.path = path
        self.file = file
        self.size = file.seek(0, 2)
        self.catalog = Catalog()
        self.header: dict[str, Any] = {}
        self.truncation: dict[str, Any] | None = None
        self.in_progress = is_being_written(file)
        """A live writer holds the file (recording/lock.py): a missing END means "not yet", and
        a torn tail is the frame being written, not damage."""
        self.frames_end = len(MAGIC)
        self.used_index = False
        self._numbers: dict[int, int] = {}
        self.recording_bytes_max = (
            recording_bytes_max if recording_bytes_max is not None else recording_bytes_max_default()
        )
        self.decoded_bytes = 0
        """Bytes of the distinct frames decoded so far (charged against ``recording_bytes_max``)."""
        self._charged: set[int] = set()

    @classmethod
    def open(cls, path: str | Path, *, recording_bytes_max: int | None = None) -> Self:
        """Open and catalog a recording; raises RecordingError when it cannot be read.

        ``recording_bytes_max``: the decoded-bytes budget (default: recording_bytes_max_default())."""
        target = Path(path)
        file = open_regular(target)
        reader = cls(target, file, recording_bytes_max)
        try:
            reader._load()
        except BaseException:
            file.close()
            raise
        return reader

    def close(self) -> None:
        self.file.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- opening ----------------------------------------------------------------------------------

    def _load(self) -> None:
        if self.size < len(MAGIC) or self._read(0, len(MAGIC)) != MAGIC:
            if self.size < len(MAGIC) and MAGIC.startswith(self._read(0, self.size)):
                raise RecordingError(
                    f"{self.path}: truncated inside its first {len(MAGIC)} bytes: nothing to open"
                )
            raise RecordingError(f"{self.path}: not a timetravel recording (bad magic at byte 0)")
        if not self._load_index():
            self._scan()
        if not self.catalog.frames or self.catalog.frames[0][1] != FrameType.HEADER:
            raise RecordingError(f"{self.path}: truncated inside its header frame: nothing to open")
        self.header = self._check_header(self.read_frame(self.catalog.frames[0][0], 0)[1])

    def _load_index(self) -> bool:
        if self.size < len(MAGIC) + FRAME_HEADER_BYTES + TRAILER_BYTES:
            return False
        raw = self._read(self.size - TRAILER_BYTES, TRAILER_BYTES)
        index_offset, magic, check = TRAILER.unpack(raw)
        if magic != TRAILER_MAGIC or check != header_checksum(raw[:12]):
            return False
        if not len(MAGIC) <= index_offset < self.size - TRAILER_BYTES:
            return False
        frame_type, payload = self.read_frame(index_offset, None)
        if frame_type != FrameType.INDEX:
            raise RecordingError(
                f"{self.path}: the trailer points at byte {index_offset}, which is not the index"
            )
        self.catalog = Catalog.from_index(payload)
        self._check_offsets(index_offset)
        self.catalog.frames.append((index_offset, int(FrameType.INDEX)))
        self.frames_end = index_offset
        self.used_index = True
        return True

    def _check_offsets(self, index_offset: int) -> None:
        """Every offset an index names lies between the magic and the index itself."""
        catalog = self.catalog
        offsets: list[int] = [offset for offset, _kind in catalog.frames]
        for batches in catalog.events.values():
            offsets.extend(batch.offset for batch in batches)
        for infos in catalog.manifests.values():
            offsets.extend(info.offset for info in infos)
        for entries in catalog.choices.values():
            offsets.extend(offset for _first, _count, offset in entries)
        bad = [offset for offset in offsets if not len(MAGIC) <= offset < index_offset]
        if catalog.blobs:
            low, high = min(catalog.blobs.values()), max(catalog.blobs.values())
            bad.extend(offset for offset in (low, high) if not len(MAGIC) <= offset < index_offset)
        if bad:
            raise RecordingError(
                f"{self.path}: the index at byte {index_offset} names offset {bad[0]}, outside the frames "
                f"({len(MAGIC)}..{index_offset})"
            )

    def _scan(self) -> None:
        offset = len(MAGIC)
        number = 0
        last_type = None
        while offset < self.size:
            remaining = self.size - offset
            if remaining < FRAME_HEADER_BYTES:
                if last_type == FrameType.INDEX and remaining == TRAILER_BYTES:
                    raise RecordingError(f"{self.path}: the trailer at byte {offset} is corrupt")
                self._truncated(offset, number, remaining)
                break
            frame_type, _flags, stored, _raw = self._frame_header(offset, number)
            if offset + FRAME_HEADER_BYTES + stored > self.size:
                self._truncated(offset, number, remaining)
                break
            _, payload = self.read_frame(offset, number)
            if frame_type != FrameType.INDEX:
                self.catalog.add(offset, frame_type, payload)
            else:
                self.catalog.frames.append((offset, frame_type))
            last_type = frame_type
            offset += FRAME_HEADER_BYTES + stored
            number += 1
        self.frames_end = offset if self.truncation is None else self.truncation["offset"]

    def _truncated(self, offset: int, number: int, remaining: int) -> None:
        self.truncation = {"offset": offset, "frame": number, "bytes_lost": remaining}

    def _check_header(self, header: dict[str, Any]) -> dict[str, Any]:
        version = header.get("format")
        if not isinstance(version, list) or len(version) != 2 or version[0] != FORMAT_VERSION[0]:
            raise RecordingError(
                f"{self.path}: recording format {version!r} is not readable by this version "
                f"(reads {FORMAT_VERSION[0]}.x)"
            )
        for key, kind in (("scenario", str), ("config", dict), ("seed", int), ("display_unit", str)):
            if not isinstance(header.get(key), kind):
                raise RecordingError(f"{self.path}: header field {key!r} is missing or malformed")
        oldest = SCENARIO_FORMAT_MIN.get(header["scenario"])
        if oldest is not None and tuple(version) < oldest and all(isinstance(part, int) for part in version):
            raise RecordingError(
                f"{self.path}: a {header['scenario']} recording of format {version[0]}.{version[1]} "
                f"(timetravel {header.get('timetravel', '?')}): this version reads {header['scenario']} "
                f"recordings of format {oldest[0]}.{oldest[1]} and later; record the run again"
            )
        return header

    # -- frames -----------------------------------------------------------------------------------

    def _read(self, offset: int, length: int) -> bytes:
        self.file.seek(offset)
        return self.file.read(length)

    def _where(self, offset: int, number: int | None, frame_type: int | None = None) -> str:
        name = f" ({frame_name(frame_type)})" if frame_type is not None else ""
        which = f"frame {number}" if number is not None else "frame"
        return f"{self.path}: {which}{name} at byte {offset}"

    def _frame_header(self, offset: int, number: int | None) -> tuple[int, int, int, int]:
        raw = self._read(offset, FRAME_HEADER_BYTES)
        if len(raw) < FRAME_HEADER_BYTES:
            raise RecordingError(f"{self._where(offset, number)}: the file ends inside the frame header")
        marker, frame_type, flags, stored, raw_length, _check, check = FRAME_HEADER.unpack(raw)
        if marker != FRAME_MARKER or check != header_checksum(raw[:20]):
            raise RecordingError(f"{self._where(offset, number)}: frame header is corrupt")
        if stored > FRAME_STORED_BYTES_MAX or raw_length > FRAME_RAW_BYTES_MAX or flags & ~FLAG_ZSTD:
            raise RecordingError(
                f"{self._where(offset, number, frame_type)}: frame lengths or flags out of range"
            )
        if not flags & FLAG_ZSTD and stored != raw_length:
            raise RecordingError(
                f"{self._where(offset, number, frame_type)}: an uncompressed frame of {stored} bytes "
                f"says it holds {raw_length}"
            )
        return frame_type, flags, stored, raw_length

    def read_frame(self, offset: int, number: int | None = None) -> tuple[int, dict[str, Any]]:
        """Read, check and decode the frame at ``offset``: (type, payload map)."""
        frame_type, flags, stored_length, raw_length = self._frame_header(offset, number)
        where = self._where(offset, number, frame_type)
        stored = self._read(offset + FRAME_HEADER_BYTES, stored_length)
        if len(stored) != stored_length:
            raise RecordingError(
                f"{where}: the file ends inside the frame ({len(stored)} of {stored_length} bytes)"
            )
        checksum = struct.unpack_from("<Q", self._read(offset + 12, 8))[0]
        if payload_checksum(stored) != checksum:
            raise RecordingError(f"{where}: checksum mismatch (the frame is corrupt)")
        schema = schema_for(frame_type)
        if raw_length > schema.raw_bytes_max:
            raise RecordingError(
                f"{where}: payload of {raw_length} bytes exceeds the {schema.raw_bytes_max} bytes that frame type may hold"
            )
        self._charge(offset, raw_length, where)
        raw = stored
        if flags & FLAG_ZSTD:
            try:
                raw = decompress(stored, raw_length)
            except DecompressError as error:
                raise RecordingError(f"{where}: {error}") from None
        try:
            payload = unpack(
                raw, bytes_max=FRAME_RAW_BYTES_MAX, items_max=items_max_for(len(raw), schema.items_max)
            )
        except DecodeError as error:
            raise RecordingError(f"{where}: {error}") from None
        if not isinstance(payload, dict):
            raise RecordingError(f"{where}: payload is not a map")
        problem = check_payload(frame_type, payload)
        if problem is not None:
            raise RecordingError(f"{where}: {problem}")
        return frame_type, payload

    def _charge(self, offset: int, raw_length: int, where: str) -> None:
        """Charge a frame's decoded size to the recording's budget, once per frame, before decoding."""
        if offset in self._charged:
            return
        if self.decoded_bytes + raw_length > self.recording_bytes_max:
            raise RecordingError(
                f"{where}: decoding it would take the recording past {self.recording_bytes_max} decoded "
                f"bytes (recording_bytes_max; set {RECORDING_BYTES_MAX_VARIABLE} to allow more)"
            )
        self.decoded_bytes += raw_length
        self._charged.add(offset)

    def _frame_number(self, offset: int) -> int | None:
        if len(self._numbers) != len(self.catalog.frames):
            self._numbers = {
                frame_offset: number for number, (frame_offset, _) in enumerate(self.catalog.frames)
            }
        return self._numbers.get(offset)

    def _payload(self, offset: int, expected: FrameType) -> dict[str, Any]:
        frame_type, payload = self.read_frame(offset, self._frame_number(offset))
        if frame_type != expected:
            raise RecordingError(f"{self._where(offset, None, frame_type)}: expected a {expected.name} frame")
        return payload

    def where(self, offset: int, *, with_path: bool = True) -> str:
        """``<path>: frame <n> (<TYPE>) at byte <offset>`` for a frame of the catalog."""
        number = self._frame_number(offset)
        frame_type = self.catalog.frames[number][1] if number is not None else None
        where = self._where(offset, number, frame_type)
        return where if with_path else where.removeprefix(f"{self.path}: ")

    def frame_payload(self, offset: int, expected: FrameType) -> dict[str, Any]:
        """The whole payload of the frame at ``offset`` (the catalog keeps only summaries)."""
        return self._payload(offset, expected)

    def verify_frames(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Read and check every frame (checksums, decompression, decoding); returns the count."""
        for number, (offset, _kind) in enumerate(self.catalog.frames):
            self.read_frame(offset, number)
            if progress is not None:
                progress(number + 1, len(self.catalog.frames))
        return len(self.catalog.frames)
