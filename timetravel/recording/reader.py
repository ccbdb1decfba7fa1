"""Reading a .ttr as untrusted input: tolerant of truncation, strict about corruption.

* **Truncation**: a file cut at any byte opens with every complete frame. When the trailer is
  missing, the reader scans the frames from the start and rebuilds the catalog; ``truncation``
  says where the file stops and how many bytes of an incomplete frame were lost, and
  ``describe_loss()`` what that means (no END frame: the run's end is not recorded).
* **Corruption**: every frame header carries its own checksum and every payload an xxh3-64, so a
  damaged byte is a :class:`RecordingError` naming the frame and its byte offset, never a
  traceback. A damaged header can therefore not pass for a truncated file.
* **Limits, checked before the work**: lengths are capped (FRAME_STORED_BYTES_MAX and each frame
  type's ``raw_bytes_max`` in schema.py) from the frame header; a zstd frame's declared content
  size must equal the stated raw length before it is decompressed, and one that declares none is
  streamed with a hard output cap (decompress.py); the decoded bytes of all distinct frames of one
  open recording are capped by ``recording_bytes_max``; msgpack is decoded by the kernel's bounded
  ``unpack`` with a cap on the containers it builds; array shapes are checked in Python integers
  before numpy allocates; arrays only of allow-listed dtypes; no pickle, no eval, no import.
* **Schema**: every decoded payload is checked against its frame type's field table (schema.py),
  so a well-formed frame with a wrong value is one error naming the frame, the field and the offset.
* **Lazy**: opening reads the header and the index; blobs are read when a snapshot is restored,
  through bounded caches of decoded frames and pages. Page digests are checked on decode.
"""

from __future__ import annotations

import os
import struct
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Any

import msgpack
import numpy as np
import xxhash

from timetravel.recording.catalog import MAIN_BRANCH, Catalog, EventBatchInfo, ManifestInfo, check_blob_entry
from timetravel.recording.decompress import DecompressError, decompress
from timetravel.recording.files import open_regular
from timetravel.recording.format import (
    BLOB_ARRAY,
    BLOB_PAGE,
    BLOB_VALUE,
    FLAG_ZSTD,
    FORMAT_VERSION,
    FRAME_HEADER,
    FRAME_HEADER_BYTES,
    FRAME_MARKER,
    FRAME_RAW_BYTES_MAX,
    FRAME_STORED_BYTES_MAX,
    MAGIC,
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
from timetravel.sim import speedups
from timetravel.sim.encoding import DecodeError, array_digest_from_pages, unpack
from timetravel.sim.event import Event
from timetravel.sim.world import World, queue_digest_from
from timetravel.snapshot.assemble import (
    STORED_PARTS,
    assemble_world,
    metrics_root,
    node_segment,
    nodes_root_from_segments,
    root_from_digests,
)
from timetravel.snapshot.codec import (
    XOR_CHAIN_MAX,
    build_array,
    decode_page,
    decode_value_sized,
    fresh_copy,
)

FRAME_CACHE_BYTES_MAX = 128 * 1024 * 1024
"""Decoded BLOBS and EVENTS frames kept for later seeks."""
PAGE_CACHE_BYTES_MAX = 256 * 1024 * 1024
"""Decoded array pages kept for later seeks."""
DECODED_EVENT_BATCHES_MAX = 4
"""Decoded EVENTS frames kept. A decoded batch is thousands of small tuples and lists, which every
full garbage collection walks: 128 MB of them held a million objects, and a collection of those
stops every thread for a second. The stored bytes stay in the frame cache (bytes are not walked)
and decode again in a few milliseconds; seeks and searches read batches in order, so a few
suffice."""
MANIFEST_CACHE_ENTRIES_MAX = 256
DECODED_PART_BYTES_MAX = 64 * 1024 * 1024
"""Decoded world parts kept read-only, by digest, for restores to copy (estimated bytes: 6x the
blob, as recording/shared_nodes.py estimates). Every restore needs its parts afresh (a handler may
change them), and at 10,000 ranks the fabric part holds 180,000 ints: decoding them took ~20 ms a
seek, copying a kept decode (snapshot/codec.py ``fresh_copy``) takes ~1 ms; most snapshots of a
run share their parts' digests."""
ARRAY_HEADER_BYTES_MAX = 16 * 1024 * 1024
ARRAY_HEADER_CACHE_BYTES_MAX = 64 * 1024 * 1024
ARRAY_CACHE_BYTES_MAX = 256 * 1024 * 1024
"""Built arrays kept (read-only, by digest) so that a restore copies them instead of rebuilding
them from header and pages. A 10,000-rank dp_training snapshot holds 220,000 small arrays, most
of them (data shards, unchanged slots) the same from one snapshot to the next; rebuilding each
(header lookup, page lookups, shape check, frombuffer) was half of a seek's time."""
_blob_entries = getattr(speedups.compiled, "blob_entries", None)
"""The compiled check of a BLOBS frame's entries (sim/_speedups_plain.h; None: catalog's, in Python)."""
NodeValue = Callable[[str, bytes], Any]
"""``node_value(name, digest) -> state``: a node's state for :meth:`RecordingReader.restore`."""
QueueChunkValue = Callable[[bytes], list[Any]]
"""``queue_chunk(digest) -> events``: a queue chunk's events for :meth:`RecordingReader.restore`."""
VALUE_ITEMS_MAX = 4_000_000
"""Containers and entries one stored value (a node state, a part) may decode to."""
UNCOUNTED_DECODE_BYTES_MAX = 1024 * 1024
"""Payloads, event batches and values up to this size decode without counting their items: at
worst (an empty list is 1 msgpack byte and 64 bytes of Python) one is 64 MiB, and counting costs
~40% of an event batch's decode (3.8 -> 5.3 ms for 4,096 gossip events, noisy shared machine)."""


def _items_max(data_bytes: int, items_max: int) -> int | None:
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


class _ByteLRU:
    """A least-recently-used cache bounded by the bytes of its values."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.bytes_held = 0
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self.items: dict[Any, tuple[Any, int]] = self._items
        """{key: (value, nbytes)}, to read without refreshing the LRU order (the compiled decoder's
        array look-ups: reader.value_sized)."""

    def get(self, key: Any) -> Any:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: Any, value: Any, nbytes: int) -> None:
        if key in self._items:
            return
        self._items[key] = (value, nbytes)
        self.bytes_held += nbytes
        while self.bytes_held > self.bytes_max and len(self._items) > 1:
            _key, (_value, size) = self._items.popitem(last=False)
            self.bytes_held -= size


class RecordingReader:
    """An open recording. Use :meth:`open`; close it (or use ``with``) when done."""

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
        self._frames = _ByteLRU(FRAME_CACHE_BYTES_MAX)
        self._decoded_events = _ByteLRU(DECODED_EVENT_BATCHES_MAX)
        """Bounded by count: each batch weighs 1."""
        self._pages = _ByteLRU(PAGE_CACHE_BYTES_MAX)
        self._array_headers = _ByteLRU(ARRAY_HEADER_CACHE_BYTES_MAX)
        self._arrays = _ByteLRU(ARRAY_CACHE_BYTES_MAX)
        self._decoded_parts = _ByteLRU(DECODED_PART_BYTES_MAX)
        self._manifests: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._numbers: dict[int, int] = {}
        self.recording_bytes_max = (
            recording_bytes_max if recording_bytes_max is not None else recording_bytes_max_default()
        )
        self.decoded_bytes = 0
        """Bytes of the distinct frames decoded so far (charged against ``recording_bytes_max``)."""
        self._array_bytes = 0
        """Bytes of the arrays the value being decoded holds (value_sized)."""
        self._charged: set[int] = set()

    @classmethod
    def open(cls, path: str | Path, *, recording_bytes_max: int | None = None) -> RecordingReader:
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

    def __enter__(self) -> RecordingReader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
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
                raw, bytes_max=FRAME_RAW_BYTES_MAX, items_max=_items_max(len(raw), schema.items_max)
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

    # -- what the recording holds -------------------------------------------------------------------

    def manifests(self, branch: str = MAIN_BRANCH) -> list[ManifestInfo]:
        return self.catalog.manifests.get(branch, [])

    def event_batches(self, branch: str = MAIN_BRANCH) -> list[EventBatchInfo]:
        return self.catalog.events.get(branch, [])

    def end(self, branch: str = MAIN_BRANCH) -> dict[str, Any] | None:
        return self.catalog.ends.get(branch)

    def describe_loss(self, branch: str = MAIN_BRANCH) -> list[str]:
        """Plain sentences saying what this file lacks or where its structure is inconsistent (event
        batches with gaps, duplicates or out of order: recording/structure.py); empty for a complete
        recording."""
        if self.branch_in_progress(branch):
            return self._describe_progress(branch)
        from timetravel.recording.structure import structure_warnings

        lines = structure_warnings(self)
        if self.truncation is not None and not self.in_progress:
            lines.append(
                f"the file is truncated at byte {self.truncation['offset']}: "
                f"{self.truncation['bytes_lost']} bytes of an incomplete frame were lost"
            )
        if branch not in self.catalog.ends:
            batches = self.event_batches(branch)
            last_event = batches[-1].first + batches[-1].count if batches else 0
            manifests = self.manifests(branch)
            last_snapshot = manifests[-1].events if manifests else None
            lines.append(
                f"the run's end was not recorded: events up to #{last_event} and snapshots up to "
                f"#{last_snapshot} survive"
            )
        return lines

    def branch_in_progress(self, branch: str = MAIN_BRANCH) -> bool:
        """``branch`` is the one a live writer is appending (the last one started, with no END)."""
        if not self.in_progress or branch in self.catalog.ends:
            return False
        return branch == [MAIN_BRANCH, *self.catalog.branches][-1]

    def _describe_progress(self, branch: str) -> list[str]:
        batches = self.event_batches(branch)
        manifests = self.manifests(branch)
        last_event = max(
            batches[-1].first + batches[-1].count if batches else 0, manifests[-1].events if manifests else 0
        )
        return [
            f"the recording is in progress: another process is still writing it "
            f"(events up to #{last_event} so far; the outcome is not known yet)"
        ]

    def manifest(self, info: ManifestInfo) -> dict[str, Any]:
        cached = self._manifests.get(info.offset)
        if cached is not None:
            return cached
        payload = self._payload(info.offset, FrameType.MANIFEST)
        self._manifests[info.offset] = payload
        if len(self._manifests) > MANIFEST_CACHE_ENTRIES_MAX:
            self._manifests.popitem(last=False)
        return payload

    def events_bytes(self, info: EventBatchInfo) -> bytes:
        """The batch exactly as the kernel packed it (a msgpack array of events)."""
        key = ("events-bytes", info.offset)
        cached = self._frames.get(key)
        if cached is not None:
            return cached
        data = self._payload(info.offset, FrameType.EVENTS).get("events")
        if not isinstance(data, bytes):
            where = self._where(info.offset, self._frame_number(info.offset), FrameType.EVENTS)
            raise RecordingError(f"{where}: events are not bytes")
        self._frames.put(key, data, len(data))
        return data

    def events(self, info: EventBatchInfo) -> list[Event]:
        """The events of one batch, checked (event numbers ``info.first + 1 ..``)."""
        key = ("events", info.offset)
        cached = self._decoded_events.get(key)
        if cached is not None:
            return cached
        data = self.events_bytes(info)
        where = self._where(info.offset, self._frame_number(info.offset), FrameType.EVENTS)
        try:
            items_max = _items_max(len(data), schema_for(FrameType.EVENTS).items_max)
            decoded = unpack(data, bytes_max=FRAME_RAW_BYTES_MAX, items_max=items_max)
            if not isinstance(decoded, list) or len(decoded) != info.count:
                raise DecodeError(
                    f"holds {len(decoded) if isinstance(decoded, list) else '?'} events, expected {info.count}"
                )
            events = [_event(item) for item in decoded]
        except DecodeError as error:
            raise RecordingError(f"{where}: {error}") from None
        self._decoded_events.put(key, events, 1)
        return events

    def choices(self, branch: str = MAIN_BRANCH) -> list[list[Any]]:
        """The choice log of a branch: ``[node, site, index, value]`` in drawing order."""
        entries: list[list[Any]] = []
        for _first, _count, offset in self.catalog.choices.get(branch, []):
            payload = self._payload(offset, FrameType.CHOICES)
            values = payload.get("entries")
            if not isinstance(values, list):
                raise RecordingError(
                    f"{self._where(offset, None, FrameType.CHOICES)}: entries are not a list"
                )
            entries.extend(values)
        return entries

    # -- blobs ------------------------------------------------------------------------------------

    def _blob(self, digest: bytes) -> tuple[bytes, int, int, bytes | None, int, bytes]:
        offset = self.catalog.blobs.get(digest)
        if offset is None:
            raise RecordingError(f"{self.path}: blob {digest.hex()} is missing (the recording is incomplete)")
        key = ("blobs", offset)
        entries = self._frames.get(key)
        if entries is None:
            payload = self._payload(offset, FrameType.BLOBS)
            raw_entries = payload.get("blobs")
            if not isinstance(raw_entries, list):
                raise RecordingError(f"{self._where(offset, None, FrameType.BLOBS)}: no blob list")
            checked = NotImplemented if _blob_entries is None else _blob_entries(raw_entries)
            if checked is not NotImplemented:
                entries, size = checked
            else:
                entries = {}
                size = 0
                for raw in raw_entries:
                    entry = check_blob_entry(raw)
                    entries[entry[0]] = entry
                    size += len(entry[5]) + 100
            self._frames.put(key, entries, size)
        entry = entries.get(digest)
        if entry is None:
            raise RecordingError(
                f"{self._where(offset, None, FrameType.BLOBS)}: blob {digest.hex()} is not in it"
            )
        return entry

    def value_bytes(self, digest: bytes) -> bytes:
        """A hash-form value blob, checked against its digest."""
        _digest, kind, _codec, _base, _itemsize, data = self._blob(digest)
        if kind != BLOB_VALUE or xxhash.xxh3_128_digest(data) != digest:
            raise RecordingError(f"{self.path}: value blob {digest.hex()} does not match its digest")
        return data

    def page(self, digest: bytes, depth: int = 0) -> bytes:
        """A page's bytes: XOR chains resolved, checked against its digest, cached."""
        cached = self._pages.get(digest)
        if cached is not None:
            return cached
        if depth > XOR_CHAIN_MAX:
            raise RecordingError(
                f"{self.path}: page {digest.hex()} has an XOR chain longer than {XOR_CHAIN_MAX}"
            )
        _digest, kind, codec, base_digest, itemsize, data = self._blob(digest)
        if kind != BLOB_PAGE:
            raise RecordingError(f"{self.path}: blob {digest.hex()} is not a page")
        base = self.page(base_digest, depth + 1) if base_digest is not None else None
        try:
            page = decode_page(codec, data, itemsize, base)
        except DecodeError as error:
            raise RecordingError(f"{self.path}: page {digest.hex()}: {error}") from None
        if xxhash.xxh3_128_digest(page) != digest:
            raise RecordingError(f"{self.path}: page {digest.hex()} does not match its digest")
        self._pages.put(digest, page, len(page) + 100)
        return page

    def array_header(self, digest: bytes) -> tuple[str, list[int], list[bytes]]:
        """(dtype name, shape, page digests) of an array, checked and cached."""
        cached = self._array_headers.get(digest)
        if cached is not None:
            return cached
        _digest, kind, _codec, _base, _itemsize, data = self._blob(digest)
        if kind != BLOB_ARRAY:
            raise RecordingError(f"{self.path}: blob {digest.hex()} is not an array")
        try:
            dtype, shape, pages = msgpack.unpackb(data, raw=False, max_bin_len=ARRAY_HEADER_BYTES_MAX)
            if not isinstance(dtype, str) or not isinstance(shape, list) or not isinstance(pages, list):
                raise DecodeError("array header fields have the wrong types")
            if array_digest_from_pages(dtype, shape, pages) != digest:
                raise DecodeError("array header does not match its digest")
        except (ValueError, TypeError, DecodeError, msgpack.UnpackException) as error:
            raise RecordingError(f"{self.path}: array {digest.hex()}: {error}") from None
        header = (dtype, shape, pages)
        self._array_headers.put(digest, header, 100 + 16 * len(pages))
        return header

    def array(self, digest: bytes, *, writeable: bool = True) -> np.ndarray:
        """The array a digest names: a copy of the cached read-only array (``writeable=False``: the
        cached array itself, which nobody can write)."""
        built = self._arrays.get(digest)
        if built is None:
            dtype, shape, pages = self.array_header(digest)
            try:
                built = build_array(dtype, shape, [self.page(page) for page in pages], writeable=False)
            except DecodeError as error:
                raise RecordingError(f"{self.path}: array {digest.hex()}: {error}") from None
            self._arrays.put(digest, built, built.nbytes + 100)
        return built.copy() if writeable else built

    def value(self, digest: bytes, *, writeable: bool = True) -> Any:
        """The plain-data value a blob holds, arrays rebuilt from their pages."""
        return self.value_sized(digest, writeable=writeable)[0]

    def value_sized(
        self, digest: bytes, *, writeable: bool = True, shared: dict[bytes, Any] | None = None
    ) -> tuple[Any, int, int]:
        """:meth:`value`, the length of its stored blob and the bytes of the arrays in it (what a
        cache of decoded values weighs).

        ``shared`` (read-only values only, ``writeable=False``): a dict the caller keeps across
        decodes, in which the compiled decoder shares the value's small containers with the other
        values decoded with it, out of the garbage collector's reach (snapshot/codec.py
        ``decode_value_sized``; recording/shared_nodes.py). The arrays come from the array cache
        without a Python call where it holds them (copied when ``writeable``); such hits do not
        refresh their place in the cache's LRU order, which changes what is kept, never a value."""
        self._array_bytes = 0
        try:
            data = self.value_bytes(digest)
            factory = self._array_copy if writeable else self._array_shared
            value, cached_bytes = decode_value_sized(
                data,
                factory,
                bytes_max=FRAME_RAW_BYTES_MAX,
                items_max=_items_max(len(data), VALUE_ITEMS_MAX),
                arrays=self._arrays.items,
                copy_arrays=writeable,
                shared=None if writeable else shared,
            )
        except DecodeError as error:
            raise RecordingError(f"{self.path}: value {digest.hex()}: {error}") from None
        return value, len(data), self._array_bytes + cached_bytes

    def fresh_value(self, digest: bytes) -> Any:
        """:meth:`value` (writeable), copied from a kept read-only decode of the same digest when
        the compiled core can copy it (``DECODED_PART_BYTES_MAX``): the same value, built faster."""
        held = self._decoded_parts.get(digest)
        if held is None:
            if fresh_copy(None) is NotImplemented:  # no compiled core: decode as always
                return self.value(digest)
            held, blob_bytes, array_bytes = self.value_sized(digest, writeable=False)
            self._decoded_parts.put(digest, held, 100 + 6 * blob_bytes + array_bytes)
        copied = fresh_copy(held)
        if copied is NotImplemented:
            return self.value(digest)
        return copied

    def _array_copy(self, digest: bytes) -> np.ndarray:
        array = self.array(digest, writeable=True)
        self._array_bytes += array.nbytes
        return array

    def _array_shared(self, digest: bytes) -> np.ndarray:
        array = self.array(digest, writeable=False)
        self._array_bytes += array.nbytes
        return array

    # -- restoring --------------------------------------------------------------------------------

    def restore(
        self,
        info: ManifestInfo,
        *,
        full_check: bool = False,
        node_value: NodeValue | None = None,
        queue_chunk: QueueChunkValue | None = None,
    ) -> World:
        """The World a snapshot recorded.

        Every blob is checked against its digest as it is read, and the manifest's Merkle root is
        recomputed from the digests it lists, so the restored world is the recorded one without
        rehashing it. ``full_check`` also recomputes ``state_hash()`` of the restored world
        (tests and ``replay`` use it: it checks the decoder as well as the data).

        ``node_value(name, digest)`` and ``queue_chunk(digest)``, when given, supply a node's state
        and a queue chunk's events instead of decoding them here (recording/shared_nodes.py shares
        decoded states between the seeks of one Session); the digests they are asked for are the
        ones the manifest's root was checked against, and they return what :meth:`value` would.
        """
        manifest = self.manifest(info)
        where = self._where(info.offset, self._frame_number(info.offset), FrameType.MANIFEST)
        try:
            root = manifest_root(manifest)
            world = self._assemble(manifest, node_value, queue_chunk)
        except (KeyError, TypeError, ValueError) as error:
            raise RecordingError(f"{where}: manifest is malformed: {error}") from None
        if root != info.state_hash or manifest.get("state_hash") != info.state_hash:
            raise RecordingError(f"{where}: the manifest's digests do not add up to its state hash")
        if full_check:
            self.check_restored(info, world)
        return world

    def check_restored(self, info: ManifestInfo, world: World) -> None:
        """Recompute ``world.state_hash()`` against the snapshot it was restored from (``restore``'s
        ``full_check``, for a world restored another way: recording/shared_nodes.py)."""
        if world.state_hash() != info.state_hash:
            where = self._where(info.offset, self._frame_number(info.offset), FrameType.MANIFEST)
            raise RecordingError(
                f"{where}: snapshot restores to state {world.state_hash()}, recorded {info.state_hash}"
            )

    def _assemble(
        self,
        manifest: dict[str, Any],
        node_value: NodeValue | None = None,
        queue_chunk: QueueChunkValue | None = None,
    ) -> World:
        part_digests = manifest["parts"]
        parts = {name: self.fresh_value(_digest(part_digests[name])) for name in STORED_PARTS}
        nodes = {}
        if node_value is None:
            for name, node_digest in manifest["nodes"]:
                nodes[str(name)] = self.value(_digest(node_digest))
        else:
            for name, node_digest in manifest["nodes"]:
                nodes[str(name)] = node_value(str(name), _digest(node_digest))
        events: list[Any] = []
        for _low, _high, _count, _total, chunk_digest in manifest["queue"]:
            if queue_chunk is None:
                events.extend(self.value(_digest(chunk_digest), writeable=False))
            else:
                events.extend(queue_chunk(_digest(chunk_digest)))
        metrics: dict[str, list[Any]] = {}
        for name, _length, chunk_digests in manifest["metrics"]:
            series: list[Any] = []
            for chunk_digest in chunk_digests:
                series.extend(self.value(_digest(chunk_digest)))
            metrics[str(name)] = series
        chain_digest, chain_events, open_bytes = manifest["chain"]
        open_batch = unpack(open_bytes) if open_bytes else []
        display_unit = manifest.get("display_unit", self.header.get("display_unit", "ms"))
        try:
            return assemble_world(
                parts, nodes, events, metrics, (chain_digest, chain_events, open_batch), display_unit
            )
        except DecodeError as error:
            raise ValueError(str(error)) from None


def manifest_root(manifest: dict[str, Any]) -> str:
    """The hex Merkle root that a manifest's listed digests add up to (World.state_hash's rule)."""
    digests = {name: _digest(manifest["parts"][name]) for name in STORED_PARTS}
    digests["nodes"] = nodes_root_from_segments(
        [node_segment(str(name), _digest(node_digest)) for name, node_digest in manifest["nodes"]]
    )
    count = total = 0
    for _low, _high, chunk_count, chunk_total, _chunk_digest in manifest["queue"]:
        count += int(chunk_count)
        total += int.from_bytes(_bytes(chunk_total), "little")
    digests["queue"] = queue_digest_from(count, total)
    digests["metrics"] = metrics_root(
        [
            (str(name), int(length), [_digest(chunk) for chunk in chunks])
            for name, length, chunks in manifest["metrics"]
        ]
    )
    return root_from_digests(digests)


def _bytes(value: Any) -> bytes:
    if not isinstance(value, bytes):
        raise ValueError("expected bytes")
    return value


def _digest(value: Any) -> bytes:
    if not isinstance(value, bytes) or len(value) != 16:
        raise ValueError("a digest is not 16 bytes")
    return value


def _event(data: Any) -> Event:
    if not isinstance(data, list) or len(data) != 5:
        raise DecodeError("a recorded event is not a list of 5 fields")
    t, seq, dst, kind, payload = data
    if not (isinstance(t, int) and isinstance(seq, int) and isinstance(dst, str) and isinstance(kind, str)):
        raise DecodeError("a recorded event has fields of the wrong types")
    return Event(t, seq, dst, kind, payload)
