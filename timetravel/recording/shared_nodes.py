"""Decoded node states shared between the seeks of one Session, so a seek decodes only what it runs.

A seek in a 10,000-rank recording restored 10,000 node states (2.7 million Python objects:
msgpack decoding alone took ~0.5 s on the shared 2-core machine), then re-executed events that
reach a few hundred to a couple of thousand of those nodes, then freed the previous world's 10,000
states and let the garbage collector walk the new ones. Most of that work was for nodes the seek
never touches.

:class:`SharedNodes` keeps each node state it has decoded, by content digest (the blob's xxh3-128,
which is the node's Merkle leaf), with its arrays read-only (the reader's array cache), bounded by
``bytes_max``. :meth:`SharedNodes.restore` builds the World of a snapshot in which

* the nodes named ``private`` (the ones the re-execution will run: the ``dst`` of the recorded
  events up to the target) are decoded afresh, writeable, exactly as ``RecordingReader.restore``
  decodes them;
* every other node is the shared decoded state of its digest: equal content, by the digest the
  manifest's Merkle root was checked against, so the World is bit for bit the one a full decode
  gives (``state_hash()`` equal; tests/test_seek_shared.py checks it after every kind of move).

The rule that makes sharing sound is the kernel's, the one copy-on-write snapshots already rely
on: a handler changes only its own node (``dst``). A shared state is therefore never written while
the events that run are the recorded ones; the Session privatizes a node (:meth:`private_value`)
before re-executing an event on it, and forgets every shared state (:meth:`clear`) when a
re-execution fails or diverges from the recording, since diverged events may have run on nodes
that were shared. The arrays of a shared state are read-only, so a handler that breaks the rule by
writing another node's arrays fails loudly instead of changing a state other worlds hold.

The private states are built out of the cyclic garbage collector's reach too (their containers
untracked, as the shared ones are). A seek pauses the collector, and the first allocation after it
ran a young collection over everything the seek built: 20-45 ms a seek at 10,000 ranks, ~3 ms once
the 850-1,800 re-executed rank states (~75,000 containers) were out of it, and a full collection
during a seek walked them again. World data is acyclic plain data (snapshots could not encode a
cycle), so reference counting frees these states as it frees the shared ones; a handler can still
put anything into them (a dict given a tracked value is tracked again by CPython).

Limits are the reader's: every value goes through ``RecordingReader.value`` (blob digests,
containers, dtypes and shapes checked before anything is built), so a hostile recording is refused
here exactly as in a full restore.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from timetravel.recording import speedups
from timetravel.recording.catalog import ManifestInfo
from timetravel.recording.reader import RecordingReader
from timetravel.sim.event import Event
from timetravel.sim.world import World
from timetravel.snapshot.assemble import stored_events

SHARED_NODE_BYTES_MAX = 512 * 1024 * 1024
"""Estimated bytes of the decoded node states kept, their arrays included (about five distinct
snapshots of 10,000 dp_training ranks). A state's arrays are the reader's cached read-only arrays,
counted here too: a state keeps them alive after the array cache has let them go."""
DECODED_BYTES_PER_BLOB_BYTE = 6
"""A decoded dp_training rank state weighs ~5.6x its hash-form blob (tracemalloc: 7.9 KB of Python
objects for 1.4 KB of msgpack), arrays apart."""
OBJECT_BYTES = 100
QUEUE_CHUNK_EVENTS_MAX = 200_000
SHARED_CONTAINERS_MAX = 100_000
"""Decoded small containers kept by their bytes for the next states' decodes (``_containers``);
past this many (checked after each restore; the compiled decoder adds at most 200,000 in one)
they are forgotten and learnt again. A 10,000-rank dp_training snapshot adds ~87,000, mostly
small dicts and lists of a GPU's state; they are also parts of the shared states, so what they
hold beyond those is the containers of states the LRU has let go (tens of MB at most)."""
"""Decoded queue-chunk events kept (Event tuples are immutable and shared, as the store shares them)."""


def untrack_events(events: list[Event]) -> None:
    """:func:`untrack` for kept read-only events (their tuples and payloads; recording's compiled
    ``untrack_events``): a 10,000-rank snapshot's queue chunks hold ~20,000 of them."""
    if speedups.compiled is not None:
        speedups.compiled.untrack_events(events)


def untrack(value: Any) -> None:
    """Take a shared state's containers out of the cyclic garbage collector's reach.

    A first seek into a 10,000-rank snapshot decodes ~360,000 containers (dicts and lists of the
    ranks' GPU streams, inboxes and logs) that live as long as the Session shares them. The collector
    walked them all in the first young collection after the seek (170-330 ms) and again in the
    older generations (a full collection of 610-800 ms inside a later seek), for nothing: decoded
    plain data is acyclic, so reference counting frees it when the last world and this cache let it
    go. Recording's compiled code untracks them (~50 ms for 10,000 ranks); without it they stay tracked, as
    before (a Python walk would cost what the collector's does). The value itself is unchanged: the
    World is the same, and a dict that is given a tracked item later is tracked again by CPython."""
    if speedups.compiled is not None:
        speedups.compiled.untrack(value)


class SharedNodes:
    """Decoded node states and queue chunks by digest, for the restores of one Session's seeks."""

    def __init__(self, reader: RecordingReader, bytes_max: int = SHARED_NODE_BYTES_MAX) -> None:
        self.reader = reader
        self.bytes_max = bytes_max
        self.bytes_held = 0
        self._states: OrderedDict[bytes, tuple[Any, int]] = OrderedDict()
        """digest -> (decoded state, estimated bytes), least recently used first."""
        self._chunks: dict[bytes, list[Event]] = {}
        self._containers: dict[bytes, Any] = {}
        """Decoded containers by their msgpack bytes, shared between the shared states (the
        compiled decoder's memo: snapshot/codec.py ``decode_value_sized``)."""
        self._chunk_events = 0
        self._base: tuple[bytes, Any] | None = None
        """The bytes and decoded state of the shared state decoded last: the next one is decoded
        against it (recording/reader.py ``shared_values``)."""
        self.decoded_private = 0
        self.decoded_shared = 0
        """Node states decoded by the last restore, private and shared (what a seek cost)."""

    def clear(self) -> None:
        """Forget every shared state (a re-execution failed or diverged: it may have written one)."""
        self._states.clear()
        self._chunks.clear()
        self._containers = {}
        self.bytes_held = 0
        self._chunk_events = 0
        self._base = None

    def restore(self, info: ManifestInfo, private: set[str]) -> tuple[World, dict[str, bytes]]:
        """The World at snapshot ``info``, the ``private`` nodes decoded afresh and the others shared;
        also {node: digest} of the shared ones (the Session privatizes them before running them)."""
        shared: dict[str, bytes] = {}
        self.decoded_private = self.decoded_shared = 0
        nodes: dict[str, Any] = {}
        held = self._states
        value = self.reader.value
        # One tight loop over the (checked, cached) node list: at 10,000 nodes, calling back per node
        # from the reader's restore cost ~10 ms a seek before anything was decoded.
        missing: list[tuple[str, bytes]] = []
        for name, digest in self.reader.node_digests(info):
            if name in private:
                self.decoded_private += 1
                nodes[name] = value(digest, untracked=True)
                continue
            shared[name] = digest
            entry = held.get(digest)
            if entry is None:
                nodes[name] = None  # decoded below, in this place of the world's node order
                missing.append((name, digest))
            else:
                held.move_to_end(digest)
                nodes[name] = entry[0]
        if missing:
            states = self._shared_states([digest for _, digest in missing])
            for (name, _digest), state in zip(missing, states, strict=True):
                nodes[name] = state
        world = self.reader.restore(info, queue_chunk=self._queue_chunk, nodes=nodes)
        if len(self._containers) > SHARED_CONTAINERS_MAX:
            self._containers = {}
        return world, shared

    def private_value(self, digest: bytes) -> Any:
        """A fresh, writeable decode of a node state (what a full restore gives), its containers out
        of the cyclic collector's reach (the module docstring says why)."""
        return self.reader.value(digest, untracked=True)

    def _shared_states(self, digests: list[bytes]) -> list[Any]:
        """The shared states of ``digests`` (none of them held), decoded in one call to the reader,
        each against the one before it, and kept."""
        states: list[Any] = []
        kept: list[tuple[Any, int]] = []
        held = self._states
        decoded, self._base = self.reader.shared_values(digests, self._containers, self._base)
        for digest, (state, blob_bytes, array_bytes) in zip(digests, decoded, strict=True):
            known = held.get(digest)  # a digest twice in one snapshot (two nodes in the same state)
            if known is not None:
                states.append(known[0])
                continue
            nbytes = OBJECT_BYTES + DECODED_BYTES_PER_BLOB_BYTE * blob_bytes + array_bytes
            entry = (state, nbytes)
            kept.append(entry)
            held[digest] = entry
            self.bytes_held += nbytes
            states.append(state)
        untrack(kept)  # the states, and the pairs (a tuple holding a dict would stay tracked for life)
        self.decoded_shared += len(decoded)
        while self.bytes_held > self.bytes_max and len(held) > 1:
            self.bytes_held -= held.popitem(last=False)[1][1]
        return states

    def _queue_chunk(self, digest: bytes) -> list[Event]:
        events = self._chunks.get(digest)
        if events is None:
            events = stored_events(self.reader.value(digest, writeable=False))
            untrack_events(events)
            if self._chunk_events + len(events) > QUEUE_CHUNK_EVENTS_MAX:
                self._chunks.clear()
                self._chunk_events = 0
            self._chunks[digest] = events
            self._chunk_events += len(events)
        return events


__all__ = ["SHARED_CONTAINERS_MAX", "SHARED_NODE_BYTES_MAX", "SharedNodes", "untrack", "untrack_events"]
