"""The catalog of a recording: where every frame, snapshot, event batch and blob is.

The writer builds it as it writes and stores it as the INDEX frame when it closes; a reader takes
it from there or, when the file was truncated or never closed, rebuilds it by scanning the
frames. Both paths go through :meth:`Catalog.add`, so they agree. Everything read from an index
is type-checked, because the file is untrusted.

**Offsets and small summaries, never whole payloads.** Memory must not grow with what the frames
hold: a catalog keeps each FAILURE, END and NOTE as a summary of bounded size (texts cut at
SUMMARY_TEXT_CHARS_MAX) with the frame's offset, keeps at most NOTES_KEPT_MAX notes (counting the
rest), and charges every summary and BRANCH record it keeps to SUMMARY_BYTES_MAX; a file that
needs more is refused with one error. Whole payloads are read again by offset when needed.
"""

from __future__ import annotations

import dataclasses
import struct
from dataclasses import dataclass, field
from typing import Any

import msgpack

from timetravel.recording.format import BLOB_KINDS, DIGEST_BYTES, FrameType, RecordingError
from timetravel.recording.schema import (
    CHAIN_BATCH_EVENTS_MAX,
    DIGEST_HEX_CHARS,
    FAILURE_FIELDS,
    INT64_MAX,
    NAME_CHARS_MAX,
    check_field,
    check_payload,
)

MAIN_BRANCH = "main"
SUMMARY_TEXT_CHARS_MAX = 1000
"""Failure and note messages as the catalog keeps them (the frame holds the whole text)."""
NOTES_KEPT_MAX = 1000
SUMMARY_BYTES_MAX = 64 * 1024 * 1024
"""The catalog's records of failures, ends, branches and notes together (an estimate: a
record's packed size plus 200 bytes of Python overhead)."""
RECORD_OVERHEAD_BYTES = 200


@dataclass(frozen=True)
class EventBatchInfo:
    """Events ``first + 1 .. first + count`` of a branch (event numbers are 1-based)."""

    first: int
    count: int
    offset: int
    digest: bytes
    partial: bool


@dataclass(frozen=True)
class ManifestInfo:
    index: int
    events: int
    t_ns: int
    offset: int
    state_hash: str
    final: bool = False
    """Taken after the run ended (end-of-run checks done), not at a pause."""


@dataclass
class Catalog:
    frames: list[tuple[int, int]] = field(default_factory=list)
    events: dict[str, list[EventBatchInfo]] = field(default_factory=dict)
    manifests: dict[str, list[ManifestInfo]] = field(default_factory=dict)
    choices: dict[str, list[tuple[int, int, int]]] = field(default_factory=dict)
    journals: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    """Per branch, its JOURNAL frames: (first event of the batch they go with, offset)."""
    failures: list[dict[str, Any]] = field(default_factory=list)
    branches: dict[str, dict[str, Any]] = field(default_factory=dict)
    ends: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[dict[str, Any]] = field(default_factory=list)
    notes_dropped: int = 0
    """NOTE frames counted but not kept (past NOTES_KEPT_MAX)."""
    blobs: dict[bytes, int] = field(default_factory=dict)
    summary_bytes: int = 0

    def add(self, offset: int, frame_type: int, payload: dict[str, Any]) -> None:
        """Record a frame (its decoded payload) at ``offset``."""
        self.frames.append((offset, frame_type))
        if frame_type == FrameType.EVENTS:
            batch = EventBatchInfo(
                _int(payload, "first"),
                _int(payload, "count"),
                offset,
                _digest(payload.get("digest")),
                bool(payload.get("partial", False)),
            )
            self.events.setdefault(_branch(payload), []).append(batch)
        elif frame_type == FrameType.MANIFEST:
            info = ManifestInfo(
                _int(payload, "index"),
                _int(payload, "events"),
                _int(payload, "t_ns"),
                offset,
                _str(payload, "state_hash"),
                bool(payload.get("final", False)),
            )
            self.manifests.setdefault(_branch(payload), []).append(info)
        elif frame_type == FrameType.BLOBS:
            entries = payload.get("blobs")
            if not isinstance(entries, list):
                raise RecordingError("BLOBS frame without a blob list")
            for entry in entries:
                if not isinstance(entry, list) or not entry:
                    raise RecordingError("BLOBS frame entry is not a list")
                self.blobs[_digest(entry[0])] = offset
        elif frame_type == FrameType.CHOICES:
            entries = payload.get("entries")
            count = len(entries) if isinstance(entries, list) else 0
            self.choices.setdefault(_branch(payload), []).append((_int(payload, "first"), count, offset))
        elif frame_type == FrameType.JOURNAL:
            self.journals.setdefault(_branch(payload), []).append((_int(payload, "first"), offset))
        elif frame_type == FrameType.FAILURE:
            self.add_failure(failure_summary(payload, offset))
        elif frame_type == FrameType.BRANCH:
            self.add_branch(branch_record(payload, offset))
        elif frame_type == FrameType.END:
            self.add_end(end_summary(payload, offset))
        elif frame_type == FrameType.NOTE:
            self.add_note(note_summary(payload, offset))

    def _keep(self, record: dict[str, Any]) -> None:
        self.summary_bytes += len(pack_record(record)) + RECORD_OVERHEAD_BYTES
        if self.summary_bytes > SUMMARY_BYTES_MAX:
            raise RecordingError(
                f"the recording's failure, end, branch and note records exceed {SUMMARY_BYTES_MAX} bytes"
            )

    def add_failure(self, record: dict[str, Any]) -> None:
        self._keep(record)
        self.failures.append(record)

    def add_branch(self, record: dict[str, Any]) -> None:
        self._keep(record)
        self.branches[record["name"]] = record

    def add_end(self, record: dict[str, Any]) -> None:
        self._keep(record)
        self.ends[record["branch"]] = record

    def add_note(self, record: dict[str, Any]) -> None:
        if len(self.notes) >= NOTES_KEPT_MAX:
            self.notes_dropped += 1
            return
        self._keep(record)
        self.notes.append(record)

    # -- a compacted file (recording/compact.py) ---------------------------------------------------

    def moved(self, new_offset: dict[int, int], blob_offsets: dict[bytes, list[int]]) -> None:
        """The frames were copied to a new file, those in ``new_offset`` (old -> new offset) kept and
        the others dropped: every offset follows. A blob whose frame was dropped stays listed when
        another kept frame holds it too (``blob_offsets``: every frame a blob was written in)."""

        def at(offset: int) -> int:
            return new_offset[offset]

        self.frames = [(at(offset), kind) for offset, kind in self.frames if offset in new_offset]
        self.events = {
            branch: [dataclasses.replace(b, offset=at(b.offset)) for b in batches if b.offset in new_offset]
            for branch, batches in self.events.items()
        }
        self.manifests = {
            branch: [dataclasses.replace(m, offset=at(m.offset)) for m in infos if m.offset in new_offset]
            for branch, infos in self.manifests.items()
        }
        self.choices = {
            branch: [(first, count, at(offset)) for first, count, offset in entries if offset in new_offset]
            for branch, entries in self.choices.items()
        }
        self.journals = {
            branch: [(first, at(offset)) for first, offset in entries if offset in new_offset]
            for branch, entries in self.journals.items()
        }
        for record in [*self.failures, *self.notes, *self.branches.values(), *self.ends.values()]:
            if record.get("offset") in new_offset:
                record["offset"] = at(record["offset"])
        blobs: dict[bytes, int] = {}
        for digest, offset in self.blobs.items():
            live = [o for o in blob_offsets.get(digest, [offset]) if o in new_offset] or (
                [offset] if offset in new_offset else []
            )
            if live:
                blobs[digest] = at(live[-1])
        self.blobs = blobs

    # -- the INDEX frame --------------------------------------------------------------------------

    def to_index(self) -> dict[str, Any]:
        digests = b"".join(self.blobs)
        offsets = struct.pack(f"<{len(self.blobs)}Q", *self.blobs.values())
        return {
            "frames": [list(frame) for frame in self.frames],
            "events": {
                branch: [[b.first, b.count, b.offset, b.digest, b.partial] for b in batches]
                for branch, batches in self.events.items()
            },
            "manifests": {
                branch: [[m.index, m.events, m.t_ns, m.offset, m.state_hash, m.final] for m in infos]
                for branch, infos in self.manifests.items()
            },
            "choices": {
                branch: [list(entry) for entry in entries] for branch, entries in self.choices.items()
            },
            "journals": {
                branch: [list(entry) for entry in entries] for branch, entries in self.journals.items()
            },
            "failures": self.failures,
            "branches": self.branches,
            "ends": self.ends,
            "notes": self.notes,
            "blob_digests": digests,
            "blob_offsets": offsets,
        }

    @classmethod
    def from_index(cls, index: dict[str, Any]) -> Catalog:
        """A catalog from an INDEX payload, every field checked (raises RecordingError)."""
        try:
            return cls._from_index(index)
        except (TypeError, ValueError, KeyError, struct.error) as error:
            raise RecordingError(f"index footer is malformed: {error}") from None

    @classmethod
    def _from_index(cls, index: dict[str, Any]) -> Catalog:
        catalog = cls()
        catalog.frames = [(_count(offset), _count(kind, 255)) for offset, kind in index["frames"]]
        for branch, batches in _dict(index, "events").items():
            catalog.events[_name(branch)] = [
                EventBatchInfo(
                    _count(first),
                    _count(count, CHAIN_BATCH_EVENTS_MAX),
                    _count(offset),
                    _digest(digest),
                    _bool(partial),
                )
                for first, count, offset, digest, partial in batches
            ]
        for branch, infos in _dict(index, "manifests").items():
            catalog.manifests[_name(branch)] = [
                ManifestInfo(
                    _count(number),
                    _count(events),
                    _count(t_ns),
                    _count(offset),
                    _hex(state_hash),
                    _bool(final),
                )
                for number, events, t_ns, offset, state_hash, final in infos
            ]
        for branch, entries in _dict(index, "choices").items():
            catalog.choices[_name(branch)] = [
                (_count(first), _count(count), _count(offset)) for first, count, offset in entries
            ]
        for branch, entries in _dict(index, "journals").items() if "journals" in index else ():
            catalog.journals[_name(branch)] = [(_count(first), _count(offset)) for first, offset in entries]
        for failure in index["failures"]:
            catalog.add_failure(failure_summary_from_index(failure))
        for name, info in _dict(index, "branches").items():
            record = branch_record(_checked_map(FrameType.BRANCH, info), _offset(info))
            if record["name"] != name:
                raise ValueError(f"branch record {name!r} is named {record['name']!r}")
            catalog.add_branch(record)
        for name, info in _dict(index, "ends").items():
            record = end_summary(_checked_map(FrameType.END, info), _offset(info))
            if record["branch"] != name:
                raise ValueError(f"end record {name!r} is of branch {record['branch']!r}")
            catalog.add_end(record)
        for note in index["notes"]:
            catalog.add_note(note_summary(_checked_map(FrameType.NOTE, note), _offset(note)))
        digests = index["blob_digests"]
        offsets_bytes = index["blob_offsets"]
        if not isinstance(digests, bytes) or not isinstance(offsets_bytes, bytes):
            raise ValueError("blob table is not bytes")
        count = len(digests) // DIGEST_BYTES
        if len(digests) % DIGEST_BYTES or len(offsets_bytes) != 8 * count:
            raise ValueError("blob table sizes disagree")
        offsets = struct.unpack(f"<{count}Q", offsets_bytes)
        # keys sliced in one list, then zipped: a third faster than a dict comprehension indexing both
        # (an open reads every blob's entry: ~0.1 s at 300,000 blobs)
        keys = [
            digests[start : start + DIGEST_BYTES] for start in range(0, count * DIGEST_BYTES, DIGEST_BYTES)
        ]
        catalog.blobs = dict(zip(keys, offsets, strict=True))
        return catalog


def pack_record(record: dict[str, Any]) -> bytes:
    return msgpack.packb(record, use_bin_type=True)


def _cut(text: Any) -> Any:
    if isinstance(text, str) and len(text) > SUMMARY_TEXT_CHARS_MAX:
        return text[: SUMMARY_TEXT_CHARS_MAX - 3] + "..."
    return text


def _failure_fields(failure: Any) -> dict[str, Any] | None:
    """The public failure fields, texts cut to SUMMARY_TEXT_CHARS_MAX (schema-checked already)."""
    if not isinstance(failure, dict):
        return None
    return {key: _cut(failure.get(key)) for key in ("kind", "node", "t_ns", "message", "signature")}


def failure_summary(payload: dict[str, Any], offset: int) -> dict[str, Any]:
    """A FAILURE frame as the catalog keeps it: branch, offset, event and the failure's fields."""
    fields = _failure_fields(payload.get("failure"))
    if fields is None:
        raise RecordingError("frame field 'failure' is not a map")
    event = payload.get("event")
    return {"branch": _branch(payload), "offset": offset, "event": event, **fields}


def failure_summary_from_index(record: Any) -> dict[str, Any]:
    """A failure record of an INDEX frame, checked like the FAILURE frame it summarizes."""
    if not isinstance(record, dict):
        raise ValueError("a failure record is not a map")
    for rule in FAILURE_FIELDS:
        problem = check_field(rule, record)
        if problem is not None:
            raise ValueError(f"a failure record's {problem}")
    summary = failure_summary(
        {"branch": record.get("branch", MAIN_BRANCH), "failure": record}, _offset(record)
    )
    if record.get("event") is not None:
        summary["event"] = _count(record["event"])
    return summary


def end_summary(payload: dict[str, Any], offset: int) -> dict[str, Any]:
    """An END frame as the catalog keeps it (every field is small; the failure's texts are cut)."""
    keys = ("stop", "outcome", "events", "t_end_ns", "state_hash", "hash_chain")
    record = {key: payload[key] for key in keys if key in payload}
    record["failure"] = _failure_fields(payload.get("failure"))
    record["branch"] = _branch(payload)
    record["offset"] = offset
    return record


def note_summary(payload: dict[str, Any], offset: int) -> dict[str, Any]:
    return {
        "branch": _branch(payload),
        "level": _cut(payload.get("level", "warning")),
        "message": _cut(payload.get("message")),
        "offset": offset,
    }


def branch_record(payload: dict[str, Any], offset: int) -> dict[str, Any]:
    """A BRANCH frame as the catalog keeps it: whole (its size is capped by the schema and charged
    to SUMMARY_BYTES_MAX), because seeking a branch needs its overrides and fork point."""
    return {**payload, "offset": offset}


def _schema_problem(frame_type: int, payload: dict[str, Any]) -> str | None:
    return check_payload(frame_type, payload)


def _checked_map(frame_type: int, value: Any) -> dict[str, Any]:
    """An index record checked like the frame it summarizes (ValueError when it is not)."""
    if not isinstance(value, dict):
        raise ValueError("a record is not a map")
    problem = _schema_problem(frame_type, value)
    if problem is not None:
        raise ValueError(f"a {FrameType(frame_type).name} record's {problem}")
    return value


def _offset(record: Any) -> int:
    offset = record.get("offset") if isinstance(record, dict) else None
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < 2**63:
        raise ValueError("a record's offset is not a file offset")
    return offset


def _count(value: Any, high: int = INT64_MAX) -> int:
    """An index integer: a count or an offset in 0..high (ValueError otherwise; int() would take "5")."""
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= high:
        raise ValueError(f"{value!r} is not an integer in 0..{high}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"{value!r} is not a boolean")
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str) or len(value) > NAME_CHARS_MAX:
        raise ValueError("a branch name is not a short string")
    return value


def _hex(value: Any) -> str:
    if not isinstance(value, str) or len(value) != DIGEST_HEX_CHARS:
        raise ValueError(f"{value!r:.40} is not a 32-digit hex digest")
    return value


def _branch(payload: dict[str, Any]) -> str:
    branch = payload.get("branch", MAIN_BRANCH)
    if not isinstance(branch, str):
        raise RecordingError("frame names a branch that is not a string")
    return branch


def _int(payload: dict[str, Any], key: str) -> int:
    value = payload.get(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise RecordingError(f"frame field {key!r} is not an integer")
    return value


def _str(payload: dict[str, Any], key: str) -> str:
    value = payload.get(key)
    if not isinstance(value, str):
        raise RecordingError(f"frame field {key!r} is not a string")
    return value


def _dict(payload: dict[str, Any], key: str) -> dict[str, Any]:
    value = payload.get(key)
    if not isinstance(value, dict):
        raise RecordingError(f"frame field {key!r} is not a map")
    return value


def _digest(value: Any) -> bytes:
    if not isinstance(value, bytes) or len(value) != DIGEST_BYTES:
        raise RecordingError("a digest is not 16 bytes")
    return value


def check_blob_entry(entry: Any) -> tuple[bytes, int, int, bytes | None, int, bytes]:
    """(digest, kind, codec, base digest, element bytes, data) of one BLOBS entry, checked."""
    if not isinstance(entry, list) or len(entry) != 6:
        raise RecordingError("a blob entry is not [digest, kind, codec, base, itemsize, data]")
    digest, kind, codec, base, itemsize, data = entry
    if kind not in BLOB_KINDS or not isinstance(codec, int) or not isinstance(itemsize, int):
        raise RecordingError("a blob entry has an unknown kind or bad codec fields")
    if not isinstance(data, bytes):
        raise RecordingError("a blob entry's data is not bytes")
    return _digest(digest), kind, codec, None if base is None else _digest(base), itemsize, data
