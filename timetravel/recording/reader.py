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

from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

from timetravel.recording import speedups
from timetravel.recording.blob_reader import BlobReader, ByteLRU, kept_untracked
from timetravel.recording.catalog import MAIN_BRANCH, EventBatchInfo, ManifestInfo
from timetravel.recording.format import (
    FRAME_RAW_BYTES_MAX,
    FrameType,
    RecordingError,
)
from timetravel.recording.frame_reader import items_max_for
from timetravel.recording.open_batch import OPEN_CHUNKS_MAX
from timetravel.recording.schema import schema_for
from timetravel.recording.structure import structure_warnings
from timetravel.sim.encoding import DecodeError, unpack
from timetravel.sim.event import Event, events_from_lists
from timetravel.sim.world import World, queue_digest_from
from timetravel.snapshot.assemble import (
    STORED_PARTS,
    assemble_world,
    metrics_root,
    node_segment,
    nodes_root_from_segments,
    root_from_digests,
)

DECODED_EVENT_BATCHES_MAX = 4
"""Decoded EVENTS frames kept. A decoded batch is thousands of small tuples and lists, which every
full garbage collection walks: 128 MB of them held a million objects, and a collection of those
stops every thread for a second. The stored bytes stay in the frame cache (bytes are not walked)
and decode again in a few milliseconds; seeks and searches read batches in order, so a few
suffice."""
MANIFEST_CACHE_ENTRIES_MAX = 256
NodeValue = Callable[[str, bytes], Any]
"""``node_value(name, digest) -> state``: a node's state for :meth:`RecordingReader.restore`."""
QueueChunkValue = Callable[[bytes], list[Any]]
"""``queue_chunk(digest) -> events``: a queue chunk's events for :meth:`RecordingReader.restore`."""
ROOTS_CHECKED_MAX = 4096
"""Manifests whose root check ``restore`` remembers (an offset each)."""


class RecordingReader(BlobReader):
    """An open recording: its frames (:class:`FrameReader`), its blobs (:class:`BlobReader`) and what they hold. Use :meth:`open`;
    close it (or use ``with``) when done."""

    def __init__(self, path: Path, file: IO[bytes], recording_bytes_max: int | None = None) -> None:
        super().__init__(path, file, recording_bytes_max)
        self._decoded_events = ByteLRU(DECODED_EVENT_BATCHES_MAX)
        """Bounded by count: each batch weighs 1."""
        self._manifests: OrderedDict[int, dict[str, Any]] = OrderedDict()
        self._node_lists: OrderedDict[int, list[tuple[str, bytes]]] = OrderedDict()
        """(node, digest) lists of manifests, checked, by offset (``node_digests``)."""
        self._roots_checked: OrderedDict[int, None] = OrderedDict()
        """Offsets of manifests whose digests were found to add up to their state hash: a later
        restore of the snapshot skips recomputing that root (~4-8 ms over 10,000 nodes). The frame
        at an offset is checksummed and the file append-only, so the answer cannot change."""

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
        kept_untracked(payload)
        self._manifests[info.offset] = payload
        if len(self._manifests) > MANIFEST_CACHE_ENTRIES_MAX:
            self._manifests.popitem(last=False)
        return payload

    def node_digests(self, info: ManifestInfo) -> list[tuple[str, bytes]]:
        """The snapshot's (node, digest) pairs in the manifest's order, checked (each digest 16
        bytes), cached by manifest (as many as the manifests kept). What ``restore`` reads from the
        manifest's node list; recording/shared_nodes.py builds a restore's nodes from it."""
        cached = self._node_lists.get(info.offset)
        if cached is not None:
            return cached
        manifest = self.manifest(info)
        try:
            listed = [(str(name), node_digest) for name, node_digest in manifest["nodes"]]
            if not all(type(node_digest) is bytes and len(node_digest) == 16 for _, node_digest in listed):
                raise ValueError("a digest is not 16 bytes")
        except (KeyError, TypeError, ValueError) as error:
            where = self._where(info.offset, self._frame_number(info.offset), FrameType.MANIFEST)
            raise RecordingError(f"{where}: manifest is malformed: {error}") from None
        self._node_lists[info.offset] = listed
        if len(self._node_lists) > MANIFEST_CACHE_ENTRIES_MAX:
            self._node_lists.popitem(last=False)
        return listed

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
            items_max = items_max_for(len(data), schema_for(FrameType.EVENTS).items_max)
            decoded = unpack(data, bytes_max=FRAME_RAW_BYTES_MAX, items_max=items_max)
            if not isinstance(decoded, list) or len(decoded) != info.count:
                raise DecodeError(
                    f"holds {len(decoded) if isinstance(decoded, list) else '?'} events, expected {info.count}"
                )
            events = events_from_lists(decoded, _event)
            kept_events_untracked(events)
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

    def journal_frames(self, branch: str, frames: list[tuple[int, int]]) -> Iterator[list[list[Any]]]:
        """The records of JOURNAL frames ``(first, offset)`` of ``branch``, frame by frame, each
        checked (torch/world/journal.py reads them as a re-execution needs them)."""
        for _first, offset in frames:
            key = ("journal", offset)
            held = self._frames.get(key)
            if held is None:
                payload = self._payload(offset, FrameType.JOURNAL)
                held = payload.get("records")
                if not isinstance(held, list) or not all(_journal_record(item) for item in held):
                    raise RecordingError(f"{self._where(offset, None, FrameType.JOURNAL)}: malformed records")
                self._frames.put(key, held, 200 * len(held) + 1)
            yield held

    # -- restoring --------------------------------------------------------------------------------

    def restore(
        self,
        info: ManifestInfo,
        *,
        full_check: bool = False,
        node_value: NodeValue | None = None,
        queue_chunk: QueueChunkValue | None = None,
        nodes: dict[str, Any] | None = None,
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
        ``nodes``, when given, is the world's node states already built, one for each pair of
        :meth:`node_digests` (what ``node_value`` would have given for it), and is used as it is.
        """
        manifest = self.manifest(info)
        checked = info.offset in self._roots_checked
        try:
            root = info.state_hash if checked else manifest_root(manifest, self.node_digests(info))
            world = self._assemble(manifest, node_value, queue_chunk, nodes)
        except (KeyError, TypeError, ValueError) as error:
            where = self._where(info.offset, self._frame_number(info.offset), FrameType.MANIFEST)
            raise RecordingError(f"{where}: manifest is malformed: {error}") from None
        if root != info.state_hash or manifest.get("state_hash") != info.state_hash:
            where = self._where(info.offset, self._frame_number(info.offset), FrameType.MANIFEST)
            raise RecordingError(f"{where}: the manifest's digests do not add up to its state hash")
        if not checked:
            self._roots_checked[info.offset] = None
            if len(self._roots_checked) > ROOTS_CHECKED_MAX:
                self._roots_checked.popitem(last=False)
        if full_check:
            self.check_restored(info, world)
        return world

    def _open_batch(self, open_part: Any) -> list[Any]:
        """The open chain batch's events as a manifest names them: packed in it (up to format 1.2) or
        as chunk blobs by digest (1.3: recording/open_batch.py)."""
        if isinstance(open_part, bytes):
            return list(unpack(open_part)) if open_part else []
        if not isinstance(open_part, list) or len(open_part) > OPEN_CHUNKS_MAX:
            raise ValueError("the open chain batch is neither bytes nor a bounded list of chunks")
        events: list[Any] = []
        for chunk_digest in open_part:
            chunk = unpack(self.value_bytes(_digest(chunk_digest)))
            if not isinstance(chunk, list):
                raise ValueError("a chunk of the open chain batch is not a list of events")
            events.extend(chunk)
        return events

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
        built_nodes: dict[str, Any] | None = None,
    ) -> World:
        part_digests = manifest["parts"]
        parts = {name: self.fresh_value(_digest(part_digests[name])) for name in STORED_PARTS}
        nodes = {}
        if built_nodes is not None:
            nodes = built_nodes
        elif node_value is None:
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
        chain_digest, chain_events, open_part = manifest["chain"]
        open_batch = self._open_batch(open_part)
        display_unit = manifest.get("display_unit", self.header.get("display_unit", "ms"))
        try:
            return assemble_world(
                parts, nodes, events, metrics, (chain_digest, chain_events, open_batch), display_unit
            )
        except DecodeError as error:
            raise ValueError(str(error)) from None


def _journal_record(record: Any) -> bool:
    """``[seq, kind, data]``: an int, a str and a list (what a journal record is made of)."""
    return (
        isinstance(record, list)
        and len(record) == 3
        and type(record[0]) is int
        and isinstance(record[1], str)
        and isinstance(record[2], list)
    )


def kept_events_untracked(events: list[Event]) -> None:
    """:func:`kept_untracked` for a decoded event batch the reader keeps (the Event tuples and their
    payloads: 4,096 events a batch, several batches kept)."""
    if speedups.compiled is not None:
        speedups.compiled.untrack_events(events)


def manifest_root(manifest: dict[str, Any], nodes: list[tuple[str, bytes]]) -> str:
    """The hex Merkle root that a manifest's listed digests add up to (World.state_hash's rule);
    ``nodes`` is its node list as ``node_digests`` checked it."""
    digests = {name: _digest(manifest["parts"][name]) for name in STORED_PARTS}
    digests["nodes"] = nodes_root_from_segments(
        [node_segment(name, node_digest) for name, node_digest in nodes]
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
