"""The catalog of a recording: where every frame, snapshot, event batch and blob is.

The writer builds it as it writes and stores it as the INDEX frame when it closes; a reader takes
it from there or, when the file was truncated or never closed, rebuilds it by scanning the
frames. Both paths go through :meth:`Catalog.add`, so they agree. Everything read from an index
is type-checked, because the file is untrusted.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from timetravel.recording.format import BLOB_KINDS, DIGEST_BYTES, FrameType, RecordingError

MAIN_BRANCH = "main"


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
    failures: list[dict[str, Any]] = field(default_factory=list)
    branches: dict[str, dict[str, Any]] = field(default_factory=dict)
    ends: dict[str, dict[str, Any]] = field(default_factory=dict)
    notes: list[dict[str, Any]] = field(default_factory=list)
    blobs: dict[bytes, int] = field(default_factory=dict)

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
        elif frame_type == FrameType.FAILURE:
            self.failures.append({"branch": _branch(payload), "offset": offset, **_dict(payload, "failure")})
        elif frame_type == FrameType.BRANCH:
            self.branches[_str(payload, "name")] = {**payload, "offset": offset}
        elif frame_type == FrameType.END:
            self.ends[_branch(payload)] = {**payload, "offset": offset}
        elif frame_type == FrameType.NOTE:
            self.notes.append({**payload, "offset": offset})

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
        catalog.frames = [(int(offset), int(kind)) for offset, kind in index["frames"]]
        for branch, batches in _dict(index, "events").items():
            catalog.events[branch] = [
                EventBatchInfo(int(first), int(count), int(offset), _digest(digest), bool(partial))
                for first, count, offset, digest, partial in batches
            ]
        for branch, infos in _dict(index, "manifests").items():
            catalog.manifests[branch] = [
                ManifestInfo(int(number), int(events), int(t_ns), int(offset), str(state_hash), bool(final))
                for number, events, t_ns, offset, state_hash, final in infos
            ]
        for branch, entries in _dict(index, "choices").items():
            catalog.choices[branch] = [
                (int(first), int(count), int(offset)) for first, count, offset in entries
            ]
        catalog.failures = [dict(failure) for failure in index["failures"]]
        catalog.branches = {str(name): dict(info) for name, info in _dict(index, "branches").items()}
        catalog.ends = {str(name): dict(info) for name, info in _dict(index, "ends").items()}
        catalog.notes = [dict(note) for note in index["notes"]]
        digests = index["blob_digests"]
        offsets_bytes = index["blob_offsets"]
        if not isinstance(digests, bytes) or not isinstance(offsets_bytes, bytes):
            raise ValueError("blob table is not bytes")
        count = len(digests) // DIGEST_BYTES
        if len(digests) % DIGEST_BYTES or len(offsets_bytes) != 8 * count:
            raise ValueError("blob table sizes disagree")
        offsets = struct.unpack(f"<{count}Q", offsets_bytes)
        catalog.blobs = {digests[i * DIGEST_BYTES : (i + 1) * DIGEST_BYTES]: offsets[i] for i in range(count)}
        return catalog


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
