"""A snapshot: one moment of a world as blobs shared by reference with its neighbours, and the
manifest a recording stores of it (the store that takes them: :mod:`timetravel.snapshot.store`)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from timetravel.sim.event import Event
from timetravel.snapshot.entries import Blob, Item, Page, QueueChunk


@dataclass(eq=False)
class Snapshot:
    """One moment of a world: blobs shared by reference with neighbouring snapshots."""

    index: int
    events: int
    t_ns: int
    seq: int
    state_hash: str
    effects_hash: str
    display_unit: str
    part_digests: dict[str, bytes]
    parts: dict[str, Blob]
    nodes: dict[str, Blob]
    node_segments: dict[str, bytes]
    queue: tuple[QueueChunk, ...]
    metrics: dict[str, tuple[int, tuple[Blob, ...]]]
    chain_digest: bytes
    chain_events: int
    chain_open: tuple[Event, ...]
    """The events of the chain batch still open (immutable tuples, shared, packed only when written)."""
    new_items: list[Item] = field(default_factory=list)
    """Blobs and pages this snapshot created (what a recorder writes); kept for the latest only."""
    bases: dict[int, Page] = field(default_factory=dict)
    """New float page (by id) -> the page it replaced in its slot; kept for the latest only."""
    bytes_new: int = 0
    """Bytes of ``new_items`` when the snapshot was taken."""

    def blobs(self) -> Iterable[tuple[str, Blob]]:
        """Every blob this snapshot references, with what it is (part, node, queue, metric)."""
        for name, blob in self.parts.items():
            yield f"part:{name}", blob
        for name, blob in self.nodes.items():
            yield f"node:{name}", blob
        for chunk in self.queue:
            yield "queue", chunk.blob
        for name, (_length, chunks) in self.metrics.items():
            for chunk_blob in chunks:
                yield f"metric:{name}", chunk_blob

    def manifest(self, chain_open: list[bytes]) -> dict[str, Any]:
        """The plain-data manifest a recording stores: every blob by digest (see recording-format.md).

        ``chain_open``: the digests of the value blobs that hold the open chain batch's events
        (``chain_open``), in chunks (recording/open_batch.py)."""
        return {
            "index": self.index,
            "events": self.events,
            "t_ns": self.t_ns,
            "seq": self.seq,
            "state_hash": self.state_hash,
            "effects_hash": self.effects_hash,
            "display_unit": self.display_unit,
            "parts": {name: blob.digest for name, blob in self.parts.items()},
            "nodes": [[name, blob.digest] for name, blob in self.nodes.items()],
            "queue": [
                [
                    chunk.seq_low,
                    chunk.seq_high,
                    chunk.count,
                    chunk.total.to_bytes(16, "little"),
                    chunk.blob.digest,
                ]
                for chunk in self.queue
            ],
            "metrics": [
                [name, length, [chunk.digest for chunk in chunks]]
                for name, (length, chunks) in self.metrics.items()
            ],
            "chain": [
                self.chain_digest,
                self.chain_events,
                chain_open,
            ],
        }
