"""The open chain batch in a snapshot's manifest, as chunks stored once (format 1.3).

A snapshot falls inside a chain batch (the kernel hashes events in batches of 4,096; a torch
recording snapshots every 192 events), and the events of the batch still open belong to the moment:
a seek restores them so that the hash chain goes on from there. Up to format 1.2 every manifest held
them whole, so each of the ~21 snapshots inside one batch stored the batch so far again — on bench
torch's 8-rank workload about half of the recording's bytes, and growing with the batch (what made
a 100-step recording 4.4 times a 25-step one). Now the open events are cut into chunks of
``OPEN_CHUNK_EVENTS`` counted from the batch's start, each stored as a value blob and named in the
manifest by digest: a chunk that is whole is the same blob in every later snapshot of the batch
(written once), and only the last, partial one is new.

The blob's bytes are ``pack_chain_batch`` of the chunk's events (what an EVENTS frame and the hash
chain read), so a reader unpacks and checks them as it does an EVENTS frame.
"""

from __future__ import annotations

from collections.abc import Sequence

import xxhash

from timetravel.sim.event import Event
from timetravel.sim.kernel import pack_chain_batch

OPEN_CHUNK_EVENTS = 64
"""Events a chunk of the open batch holds. A snapshot rewrites only its last, partial chunk (at most
63 events: ~20 KB raw on a torch run), and a manifest names at most 4,096 / 64 = 64 chunks."""
OPEN_CHUNKS_MAX = 1 << 15
"""Chunks one manifest may name (a reader refuses more before reading any): a batch of the most
events a recording admits (schema.CHAIN_BATCH_EVENTS_MAX, 2^20) in chunks of 32."""


class OpenBatchChunks:
    """The digests of the open batch's whole chunks, kept for the batch they belong to: a later
    snapshot of the same batch packs and hashes only what is new."""

    def __init__(self) -> None:
        self.batch_start = -1
        """``world.chain_events`` when the batch the cache holds began (-1: none yet)."""
        self.whole: list[bytes] = []
        """Digests of the batch's whole chunks so far, in order."""

    def chunks(
        self, chain_events: int, open_events: Sequence[Event]
    ) -> tuple[list[bytes], list[tuple[bytes, bytes]]]:
        """The digests naming ``open_events`` (the batch that began after ``chain_events`` events),
        and the (digest, bytes) of each chunk packed now, for the writer (it skips those it has)."""
        if chain_events != self.batch_start or len(self.whole) * OPEN_CHUNK_EVENTS > len(open_events):
            self.batch_start, self.whole = chain_events, []
        packed: list[tuple[bytes, bytes]] = []
        digests = list(self.whole)
        for start in range(len(self.whole) * OPEN_CHUNK_EVENTS, len(open_events), OPEN_CHUNK_EVENTS):
            chunk = list(open_events[start : start + OPEN_CHUNK_EVENTS])
            data = pack_chain_batch(chunk)
            digest = xxhash.xxh3_128_digest(data)
            packed.append((digest, data))
            digests.append(digest)
            if len(chunk) == OPEN_CHUNK_EVENTS:
                self.whole.append(digest)
        assert len(digests) <= OPEN_CHUNKS_MAX, "an open batch beyond the chunks a manifest may name"
        return digests, packed
