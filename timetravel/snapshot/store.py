"""The copy-on-write snapshot store: take a snapshot of a World cheaply, restore it exactly.

**What is copied.** A snapshot holds every part of the world. Between two snapshots, only the
nodes whose handlers ran can have changed: they are the ``dst`` of the events processed in
between, which the kernel already hands out in chain batches (:mod:`changes`), so the hot
loop tracks nothing. Those nodes are encoded again; every other node reuses the previous
snapshot's blob *by reference*. Inside a re-encoded node, arrays are cut into pages hashed with
xxh3-128 and only changed pages are new objects. Pending events are kept in generations (events
scheduled between two snapshots), and a generation is re-encoded only when one of its events ran.
Metric series are kept in 1024-entry chunks; only the open tail chunk is re-encoded. The small
parts (clock, config, roles, fabric, faults, ...) are re-encoded every time, because nothing
tells when they change, and they are small.

**The hash.** Each stored blob is the value in the kernel's hash form, so its xxh3-128 is the
kernel's digest of that value; the store combines those digests exactly as
``World.part_digests()`` does, and the snapshot's Merkle root equals ``world.state_hash()``
without rehashing the unchanged nodes, pages or metric chunks. (``verify=True`` checks it
against a full ``state_hash()`` at every snapshot: tests use it; it costs a full hash.)

The copy-on-write rule relies on the kernel's contract that a handler changes only its own node
(``dst``) and reaches the rest of the world through ``ctx``. A handler that breaks it yields a
snapshot whose recorded state is stale; the recording catches that at close (full hash check)
and replay verification names the first event that then differs.

**Memory.** Snapshots held in memory have a byte budget (``bytes_max``). When it is exceeded the
store drops snapshots rr-style: never the latest, and the one whose removal leaves the smallest
gap relative to its distance from the present, so snapshots stay dense near the present and get
sparse far back. Memory is counted exactly: an item lives from the snapshot that created it to
the one that replaced it in its slot, and is freed when no live snapshot falls in between.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import xxhash

from timetravel.sim.encoding import merkle_root
from timetravel.sim.event import Event
from timetravel.sim.world import (
    METRIC_CHUNK_ENTRIES,
    PART_NAMES_EXCLUDED_FROM_EFFECTS,
    QUEUE_SUM_MODULUS,
    World,
    event_digest_value,
    queue_digest_from,
)
from timetravel.snapshot.assemble import (
    PART_ORDER,
    STORED_PARTS,
    metrics_root,
    node_segment,
    nodes_root_from_segments,
)
from timetravel.snapshot.changes import Changes, SnapshotError, last_events
from timetravel.snapshot.codec import Capture
from timetravel.snapshot.entries import ArrayEntry, Blob, Item, Page, QueueChunk
from timetravel.snapshot.snapshot import Snapshot

SNAPSHOT_BYTES_MAX_DEFAULT = 512 * 1024 * 1024
"""Default memory budget of a store: 512 MiB of snapshot data."""
SNAPSHOTS_MAX = 100_000
"""Hard bound on snapshots held, whatever their size."""
QUEUE_GENERATIONS_MAX = 64
"""Past this many queue generations, the older ones are merged into one."""


def part_value(world: World, name: str) -> Any:
    """The plain-data value that ``World.part_digests()`` hashes for part ``name``."""
    if name == "clock":
        return [world.t_ns, world.seq, world.events_processed]
    if name == "keys":
        return [world.scenario, world.seed, world.branch_key, world.choices]
    if name == "log":
        return [world.log, world.log_dropped]
    return getattr(world, name)


def effects_hash_from(part_digests: dict[str, bytes]) -> str:
    """Hex Merkle root over the parts a branch does not change on purpose (``World.effects_hash``)."""
    parts = [
        (name, part_digests[name]) for name in PART_ORDER if name not in PART_NAMES_EXCLUDED_FROM_EFFECTS
    ]
    return merkle_root(parts).hex()


@dataclass
class _Taking:
    """The snapshot being taken: its index, the items it stores first, the pages its XOR pages
    were encoded against."""

    index: int
    born: list[Item]
    bases: dict[int, Page]


class SnapshotStore:
    """Snapshots of one run held in memory, within a byte budget. See the module docstring."""

    def __init__(self, *, bytes_max: int = SNAPSHOT_BYTES_MAX_DEFAULT, verify: bool = False) -> None:
        if bytes_max < 0:
            raise ValueError("bytes_max must be >= 0")
        self.bytes_max = bytes_max
        self.verify = verify
        self.snapshots: list[Snapshot] = []
        self.bytes_held = 0
        self.thinned = 0
        self._next_index = 0
        self._capture = Capture(0)
        self._taking = _Taking(0, [], {})
        self._dying: dict[int, list[Item]] = {}
        """Replaced items by the index of the snapshot that replaced them (see :meth:`drop`)."""

    @property
    def latest(self) -> Snapshot | None:
        return self.snapshots[-1] if self.snapshots else None

    # -- taking -----------------------------------------------------------------------------------

    def take(
        self,
        world: World,
        since: Sequence[Sequence[Event]] | None = None,
        *,
        changes: Changes | None = None,
        elide_bytes_min: int | None = None,
    ) -> Snapshot:
        """Snapshot ``world``, a later state of the world of the latest snapshot (if any).

        ``since``: every event processed since the latest snapshot, as the kernel's chain batches
        (flushed ones from ``on_chain_batch``, then ``world.chain_batch``; events from before the
        latest snapshot may be included). Their ``dst`` are the nodes that may have changed and
        their ``seq`` the pending events that left the queue. None re-encodes every node and the
        whole queue (the first snapshot, or when nothing was tracked). ``changes``: the same
        events gathered as they were flushed (:class:`~timetravel.snapshot.changes.Changes`, since
        the latest snapshot's ``seq``), instead of ``since``. ``elide_bytes_min``: arrays of more
        bytes are taken as page digests only (codec.Capture; a recording of a world whose large
        arrays are rebuilt by re-execution). A store follows one line of history:
        a branch starts a store of its own (its blobs are shared with the parent's in a recording,
        where equal blobs are stored once by digest).
        """
        base = self.latest
        if base is not None:
            base.bases = {}
            base.new_items = []
        index = self._next_index
        self._next_index += 1
        born: list[Item] = []
        bases: dict[int, Page] = {}
        self._taking = _Taking(index, born, bases)
        self._capture = Capture(index, elide_bytes_min)
        parts = self._take_parts(world, base)
        changes = _tracked_changes(world, base, since, changes)
        dirty = None if changes is None else changes.nodes
        nodes, segments = self._take_nodes(world, base, dirty)
        queue = self._take_queue(world, base, changes)
        metrics = self._take_metrics(world, base)
        part_digests = _part_digests(parts, segments, queue, metrics)
        state_hash = merkle_root([(name, part_digests[name]) for name in PART_ORDER]).hex()
        if self.verify and state_hash != world.state_hash():
            raise SnapshotError(
                f"snapshot at event #{world.events_processed} hashes to {state_hash}, the world to "
                f"{world.state_hash()}: a handler changed state outside its own node"
            )
        snapshot = Snapshot(
            index=index,
            events=world.events_processed,
            t_ns=world.t_ns,
            seq=world.seq,
            state_hash=state_hash,
            effects_hash=effects_hash_from(part_digests),
            display_unit=world.display_unit,
            part_digests=part_digests,
            parts=parts,
            nodes=nodes,
            node_segments=segments,
            queue=queue,
            metrics=metrics,
            chain_digest=world.chain_digest,
            chain_events=world.chain_events,
            chain_open=tuple(world.chain_batch),
            new_items=born,
            bases=bases,
            bytes_new=sum(item.nbytes for item in born),
        )
        self.snapshots.append(snapshot)
        self.bytes_held += snapshot.bytes_new
        self._thin()
        return snapshot

    def _slot(self, old: Blob | None, value: Any) -> Blob:
        """The blob for ``value`` in a slot whose previous blob is ``old`` (reused when equal)."""
        capture = self._capture
        taking = self._taking
        data = capture.pack(value, old.arrays if old is not None else ())
        blob_digest = xxhash.xxh3_128_digest(data)
        if (
            old is not None
            and old.digest == blob_digest
            and (capture.elide_bytes_min is not None or not _gains_bytes(old.arrays, capture.arrays))
        ):
            return old  # (the same value with bytes where the old blob had digests: a new blob)
        blob = Blob(blob_digest, data, tuple(capture.arrays), taking.index)
        taking.born.append(blob)
        taking.born.extend(capture.new_pages)
        taking.bases.update(capture.bases)
        if old is not None:
            self._replaced(old, keep=capture.reused)
        return blob

    def _replaced(self, blob: Blob, keep: set[int] | frozenset[int] = frozenset()) -> None:
        """``blob`` left the snapshot being taken."""
        self._mark_replaced(blob, self._taking.index, keep)

    def _take_parts(self, world: World, base: Snapshot | None) -> dict[str, Blob]:
        previous = base.parts if base is not None else {}
        return {name: self._slot(previous.get(name), part_value(world, name)) for name in STORED_PARTS}

    def _take_nodes(
        self,
        world: World,
        base: Snapshot | None,
        dirty: Iterable[str] | None,
    ) -> tuple[dict[str, Blob], dict[str, bytes]]:
        world_nodes = world.nodes
        if base is None or dirty is None or list(world_nodes) != list(base.nodes):
            return self._take_all_nodes(world_nodes, base, dirty)
        nodes = dict(base.nodes)
        segments = dict(base.node_segments)
        for name in dirty:
            state = world_nodes.get(name)
            if state is None:
                continue
            old = nodes[name]
            blob = self._slot(old, state)
            if blob is not old:
                nodes[name] = blob
                segments[name] = node_segment(name, blob.digest)
        return nodes, segments

    def _take_all_nodes(
        self,
        world_nodes: dict[str, dict[str, Any]],
        base: Snapshot | None,
        dirty: Iterable[str] | None,
    ) -> tuple[dict[str, Blob], dict[str, bytes]]:
        previous = base.nodes if base is not None else {}
        dirty_set = None if dirty is None else set(dirty)
        nodes: dict[str, Blob] = {}
        segments: dict[str, bytes] = {}
        for name, state in world_nodes.items():
            old = previous.get(name)
            if old is not None and dirty_set is not None and name not in dirty_set:
                blob = old
            else:
                blob = self._slot(old, state)
            nodes[name] = blob
            segments[name] = node_segment(name, blob.digest)
        for name, old in previous.items():
            if name not in world_nodes:
                self._replaced(old)
        return nodes, segments

    def _take_queue(
        self,
        world: World,
        base: Snapshot | None,
        changes: Changes | None,
    ) -> tuple[QueueChunk, ...]:
        queue = world.queue
        if base is None or changes is None:
            chunks = [self._queue_chunk(0, world.seq, queue)] if queue else []
            if base is not None:
                for chunk in base.queue:
                    self._replaced(chunk.blob)
            return tuple(chunks)
        seq_before = base.seq
        ran = sorted(set(changes.seqs_ran))
        chunks = []
        for chunk in base.queue:
            low = bisect.bisect_left(ran, chunk.seq_low)
            if low == len(ran) or ran[low] >= chunk.seq_high:
                chunks.append(chunk)
                continue
            ran_here = set(ran[low : bisect.bisect_left(ran, chunk.seq_high)])
            kept = [event for event in chunk.events if event[1] not in ran_here]
            if len(kept) == chunk.count:
                chunks.append(chunk)
                continue
            self._replaced(chunk.blob)
            if kept:
                chunks.append(self._queue_chunk(chunk.seq_low, chunk.seq_high, kept))
        if len(chunks) >= QUEUE_GENERATIONS_MAX:
            merged = [event for chunk in chunks for event in chunk.events]
            for chunk in chunks:
                self._replaced(chunk.blob)
            chunks = [self._queue_chunk(0, seq_before, merged)]
        fresh = [event for event in queue if event[1] >= seq_before]
        if fresh:
            chunks.append(self._queue_chunk(seq_before, world.seq, fresh))
        return tuple(chunks)

    def _queue_chunk(
        self,
        seq_low: int,
        seq_high: int,
        events: Sequence[Event],
    ) -> QueueChunk:
        ordered = tuple(sorted(events))
        values = tuple(map(event_digest_value, ordered))
        blob = self._slot(None, list(ordered))
        return QueueChunk(seq_low, seq_high, ordered, values, sum(values) % QUEUE_SUM_MODULUS, blob)

    def _take_metrics(self, world: World, base: Snapshot | None) -> dict[str, tuple[int, tuple[Blob, ...]]]:
        previous = base.metrics if base is not None else {}
        metrics: dict[str, tuple[int, tuple[Blob, ...]]] = {}
        for name, series in world.metrics.items():
            length = len(series)
            old_length, old_chunks = previous.get(name, (0, ()))
            if length < old_length:
                old_length, old_chunks = 0, ()
                for chunk_blob in previous[name][1]:
                    self._replaced(chunk_blob)
            full = old_length // METRIC_CHUNK_ENTRIES
            chunks = list(old_chunks[:full])
            for start in range(full * METRIC_CHUNK_ENTRIES, length, METRIC_CHUNK_ENTRIES):
                number = start // METRIC_CHUNK_ENTRIES
                old = old_chunks[number] if number < len(old_chunks) else None
                chunks.append(self._slot(old, series[start : start + METRIC_CHUNK_ENTRIES]))
            metrics[name] = (length, tuple(chunks))
        for name, (_length, old_chunks) in previous.items():
            if name not in metrics:
                for chunk_blob in old_chunks:
                    self._replaced(chunk_blob)
        return metrics

    # -- memory -----------------------------------------------------------------------------------

    def _thin(self) -> None:
        while len(self.snapshots) > 1 and (
            self.bytes_held > self.bytes_max or len(self.snapshots) > SNAPSHOTS_MAX
        ):
            self.drop(_victim(self.snapshots))

    def drop(self, position: int) -> None:
        """Drop the snapshot at ``position`` (not the latest), freeing what only it held.

        An item is held by the live snapshots whose index lies in ``[birth, death)``. Dropping S
        (live neighbours P before it, N after it) frees exactly the items with ``P < birth`` and
        ``S < death <= N``; they are found in ``_dying`` by death index, so the cost is the
        number of items replaced between S and N, not the size of the world.
        """
        if not 0 <= position < len(self.snapshots) - 1:
            raise ValueError("the latest snapshot cannot be dropped")
        victim = self.snapshots.pop(position)
        before = self.snapshots[position - 1].index if position else -1
        after = self.snapshots[position].index
        for death in range(victim.index + 1, after + 1):
            items = self._dying.get(death)
            if not items:
                continue
            survivors = []
            for item in items:
                if item.birth > before:
                    self.bytes_held -= item.nbytes
                else:
                    survivors.append(item)
            if survivors:
                self._dying[death] = survivors
            else:
                del self._dying[death]
        victim.new_items = []
        victim.bases = {}
        self.thinned += 1

    def _mark_replaced(self, blob: Blob, index: int, keep: set[int] | frozenset[int] = frozenset()) -> None:
        """``blob`` and its pages (except those reused, by id) were replaced at snapshot ``index``."""
        dying = self._dying.setdefault(index, [])
        if blob.death is None:
            blob.death = index
            dying.append(blob)
        for array in blob.arrays:
            for page in array.pages:
                if page.death is None and id(page) not in keep:
                    page.death = index
                    dying.append(page)

    def at_or_before(self, events: int) -> Snapshot | None:
        """The latest snapshot taken at or before event number ``events``."""
        position = bisect.bisect_right([snapshot.events for snapshot in self.snapshots], events)
        return self.snapshots[position - 1] if position else None

    def counted_bytes(self) -> int:
        """Bytes of every distinct item the live snapshots reference, recounted from scratch."""
        seen: set[int] = set()
        total = 0
        for snapshot in self.snapshots:
            for _what, blob in snapshot.blobs():
                items: list[Item] = [blob, *(page for array in blob.arrays for page in array.pages)]
                for item in items:
                    if id(item) not in seen:
                        seen.add(id(item))
                        total += item.nbytes
        return total


def _gains_bytes(old: Sequence[ArrayEntry], new: Sequence[ArrayEntry]) -> bool:
    """Whether ``new`` (a capture of the same value) holds bytes of a page ``old`` held only the
    digest of (an elided array whose bytes came back: a keeping snapshot stores them)."""
    for before, after in zip(old, new, strict=False):
        if before.elided and any(
            page.data is None and fresh.data is not None
            for page, fresh in zip(before.pages, after.pages, strict=False)
        ):
            return True
    return False


def _tracked_changes(
    world: World,
    base: Snapshot | None,
    since: Sequence[Sequence[Event]] | None,
    changes: Changes | None,
) -> Changes | None:
    """What ran since ``base`` (checked when given, gathered from ``since`` else); None: re-encode all."""
    if base is None:
        return None
    ran = world.events_processed - base.events
    if changes is not None:
        changes.check(base.seq, ran)
        return changes
    return None if since is None else Changes.of(last_events(since, ran), base.seq)


def _part_digests(
    parts: dict[str, Blob],
    segments: dict[str, bytes],
    queue: tuple[QueueChunk, ...],
    metrics: dict[str, tuple[int, tuple[Blob, ...]]],
) -> dict[str, bytes]:
    """The digest of every part of a snapshot: the stored parts' blobs, the nodes' root over their
    segments, the queue's sum of event digests, the metrics' root over their chunks."""
    digests = {name: blob.digest for name, blob in parts.items()}
    digests["nodes"] = nodes_root_from_segments(list(segments.values()))
    digests["queue"] = queue_digest_from(
        sum(chunk.count for chunk in queue), sum(chunk.total for chunk in queue)
    )
    digests["metrics"] = metrics_root(
        [(name, length, [chunk.digest for chunk in chunks]) for name, (length, chunks) in metrics.items()]
    )
    return digests


def _victim(snapshots: list[Snapshot]) -> int:
    """Position of the snapshot to drop: smallest gap left behind relative to its age."""
    newest = snapshots[-1].events
    best_position = 0
    best_score = float("inf")
    for position in range(len(snapshots) - 1):
        before = snapshots[position - 1].events if position else 0
        gap = snapshots[position + 1].events - before
        age = newest - snapshots[position].events + 1
        score = gap / age
        if score < best_score:
            best_score = score
            best_position = position
    return best_position
