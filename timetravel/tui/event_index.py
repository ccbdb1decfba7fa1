"""The event log's rows from a recording: a column index built once, payloads read on demand.

The recording stores events in batches (a few thousand events each, one compressed frame per
batch). The log needs two things from them: fast filtering and seeking over *all* events (by
node, kind, time) and the full row of the few events on screen. So the index keeps only three
numpy columns per event (time, node code, kind code: 16 bytes an event) in an
:class:`~timetravel.tui.feed.EventTable`, and a row's payload is read from its batch when the
log draws it (the reader caches decoded batches).

A recording past ``EVENTS_INDEXED_MAX`` events is indexed in a window of that many events around
the cursor; :func:`window_for` says which, and the App indexes a new window when the cursor
leaves the old one. The index is built on a thread of its own with a reader of its own (a reader
is a file position and caches: two threads must not share one), and the reader then serves the
log's rows on the UI thread only.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import overload

from timetravel.explore.session import lineage
from timetravel.recording.catalog import EventBatchInfo
from timetravel.recording.reader import RecordingReader
from timetravel.sim.event import Event
from timetravel.tui.feed import EventTable

EVENTS_INDEXED_MAX = 1_000_000
"""Events one index covers (16 MB of columns); a longer recording is indexed around the cursor."""


class RecordedEvents(Sequence[Event]):
    """Events ``#first .. #last`` of a branch as a sequence, decoded batch by batch when read.

    ``self[0]`` is event ``#first``. Iterating decodes each batch once, in order; indexing
    decodes the batch that holds the event (the reader keeps recent batches decoded).
    """

    def __init__(
        self, reader: RecordingReader, batches: Sequence[EventBatchInfo], first: int, last: int
    ) -> None:
        if first < 1 or last < first - 1:
            raise ValueError(f"not an event range: #{first}..#{last}")
        self.reader = reader
        self.first = first
        self.last = last
        self._batches = [
            batch for batch in batches if batch.first < last and batch.first + batch.count >= first
        ]
        self._batch_firsts = [batch.first for batch in self._batches]
        covered = sum(min(b.first + b.count, last) - max(b.first, first - 1) for b in self._batches)
        if covered != len(self):
            raise ValueError(f"the recording holds {covered} of events #{first}..#{last}")

    def __len__(self) -> int:
        return self.last - self.first + 1

    @overload
    def __getitem__(self, index: int) -> Event: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Event]: ...

    def __getitem__(self, index: int | slice) -> Event | Sequence[Event]:
        if isinstance(index, slice):
            return [self[position] for position in range(*index.indices(len(self)))]
        if not 0 <= index < len(self):
            raise IndexError(f"event index {index} out of range (0..{len(self) - 1})")
        number = self.first + index
        position = bisect.bisect_left(self._batch_firsts, number) - 1
        batch = self._batches[position]
        return self.reader.events(batch)[number - batch.first - 1]

    def __iter__(self) -> Iterator[Event]:
        for batch in self._batches:
            events = self.reader.events(batch)
            start = max(self.first - batch.first - 1, 0)
            stop = min(self.last - batch.first, batch.count)
            yield from events[start:stop]


def window_for(cursor_event: int, events_total: int, size: int = EVENTS_INDEXED_MAX) -> tuple[int, int]:
    """The events ``(first, last)`` an index around ``cursor_event`` covers (all of them when they fit)."""
    if events_total <= size:
        return (1, events_total)
    first = max(1, min(cursor_event - size // 2, events_total - size + 1))
    return (first, first + size - 1)


class RecordingEventTable(EventTable):
    """An EventTable over a recording's events; ``close()`` closes the reader its rows come from."""

    def __init__(self, events: RecordedEvents) -> None:
        super().__init__(events, first_number=events.first)
        self.reader = events.reader

    def close(self) -> None:
        self.reader.close()


def index_events(path: str | Path, branch: str, window: tuple[int, int]) -> RecordingEventTable:
    """Index events ``window`` (``(first, last)``) of ``branch`` with a reader of its own."""
    reader = RecordingReader.open(path)
    try:
        _manifests, batches, _fork = lineage(reader, branch)
        return RecordingEventTable(RecordedEvents(reader, batches, *window))
    except BaseException:
        reader.close()
        raise
