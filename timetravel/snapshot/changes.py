"""What ran since the latest snapshot: the nodes that may have changed and the pending events gone.

A snapshot re-encodes only the nodes whose handlers ran since the latest one — the ``dst`` of the
events processed in between — and re-encodes a generation of pending events only when one of its
events ran (store.py says why). Both come from the events the kernel processed, which it hands out
in chain batches anyway, so the hot loop tracks nothing.

**Gathered batch by batch.** A recorder adds each batch to a :class:`Changes` when the kernel flushes
it, while its events are still in the cache (the kernel has just packed them for the hash chain),
instead of keeping every batch alive and walking all of them at the snapshot, cold: on the
message-level demo that walk was ~30 ms of a recorded run's ~1.3 s (8,192 events a snapshot, each
event's tuple, seq and dst read from memory the run had long moved past), and the kept batches held
every event and its payload alive until the snapshot.

**Exactly the events since the snapshot.** A batch that straddles the snapshot (an interval that
is not a multiple of the chain batch) is cut at it, as :func:`last_events` cuts ``since``, so the
nodes are visited in the same order and the recording is the same file byte for byte. (An event
from before the snapshot would do no harm to the snapshot itself — its node's blob would hash as
before and be reused — but it would change the order blobs are written in.) An event left out
would leave a changed node or a pending event that ran in the snapshot: :meth:`Changes.check`
refuses changes that hold another count of events than the world processed since the snapshot,
and changes gathered against another snapshot.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from operator import itemgetter

from timetravel.sim.event import Event
from timetravel.snapshot import speedups

_get_dst = itemgetter(2)
_get_seq = itemgetter(1)
_changes_add = getattr(speedups.compiled, "changes_add", None)
"""The compiled loop of :meth:`Changes.add` (snapshot/_speedups_changes.h; None: snapshot's compiled
code is not in use). The same dict and list, in the same order: a batch's ~4,096 events cost
~80 ns each in Python (two map passes, a comprehension) and were ~15 ms of the message-level demo's
recorded run, read from memory that the batch's packing had moved past."""


class SnapshotError(Exception):
    """A snapshot does not restore to the state it recorded (or cannot be taken)."""


def dirty_nodes(batches: Iterable[Sequence[Event]]) -> dict[str, None]:
    """Nodes whose handlers may have run: the ``dst`` of every event in ``batches``.

    A dict in first-event order, never a set: the order reaches the recording (blobs are written
    as nodes are visited), and a set's order changes with PYTHONHASHSEED, which made two
    recordings of the same seed differ byte for byte across processes.
    """
    dirty: dict[str, None] = {}
    for batch in batches:
        dirty.update(dict.fromkeys(map(_get_dst, batch)))
    return dirty


def last_events(batches: Sequence[Sequence[Event]], count: int) -> list[Sequence[Event]]:
    """The last ``count`` events of ``batches`` (the events processed since the latest snapshot)."""
    if count < 0:
        raise SnapshotError("the world is older than the latest snapshot of this store")
    tail: list[Sequence[Event]] = []
    for batch in reversed(batches):
        if count <= 0:
            break
        tail.append(batch[-count:] if len(batch) > count else batch)
        count -= len(batch)
    if count > 0:
        raise SnapshotError(f"{count} processed events are missing from the batches given to take()")
    tail.reverse()
    return tail


class Changes:
    """The events processed since a snapshot (taken after ``events_at`` events, its ``seq`` is
    ``seq_before``), summarised.

    ``nodes``: the ``dst`` of each event, in first-event order (see :func:`dirty_nodes`);
    ``seqs_ran``: the ``seq`` of each event older than ``seq_before`` — the events that were
    pending at that snapshot and have run since; ``events``: how many events were added.
    """

    __slots__ = ("events", "events_at", "nodes", "seq_before", "seqs_ran")

    def __init__(self, seq_before: int, events_at: int = 0) -> None:
        self.seq_before = seq_before
        self.events_at = events_at
        self.nodes: dict[str, None] = {}
        self.seqs_ran: list[int] = []
        self.events = 0

    @classmethod
    def of(cls, batches: Iterable[Sequence[Event]], seq_before: int) -> Changes:
        """Changes from batches that hold only events since the snapshot (:func:`last_events`)."""
        changes = cls(seq_before)
        for batch in batches:
            changes.add(batch)
        return changes

    def add(self, events: Sequence[Event], first: int | None = None) -> None:
        """Add a batch of processed events, in the order they ran; ``first``: how many events the
        world had processed before the batch's first (None: all of them ran after the snapshot)."""
        start = 0 if first is None or first >= self.events_at else self.events_at - first
        if _changes_add is not None and type(events) is list:
            _changes_add(events, start, self.seq_before, self.nodes, self.seqs_ran)
            self.events += max(len(events) - start, 0)
            return
        if start:
            events = events[start:]
        seq_before = self.seq_before
        self.nodes.update(dict.fromkeys(map(_get_dst, events)))
        self.seqs_ran += [seq for seq in map(_get_seq, events) if seq < seq_before]
        self.events += len(events)

    def check(self, seq_before: int, events_since: int) -> None:
        """Raise SnapshotError unless these changes cover the ``events_since`` events processed since
        the snapshot whose ``seq`` is ``seq_before``."""
        if events_since < 0:
            raise SnapshotError("the world is older than the latest snapshot of this store")
        if seq_before != self.seq_before:
            raise SnapshotError(
                f"the changes were gathered since the snapshot at seq {self.seq_before}, "
                f"the latest is at seq {seq_before}"
            )
        if self.events < events_since:
            raise SnapshotError(
                f"{events_since - self.events} processed events are missing from the changes given to take()"
            )
        if self.events > events_since:
            raise SnapshotError(
                f"the changes given to take() hold {self.events} events, the world processed "
                f"{events_since} since the latest snapshot"
            )
