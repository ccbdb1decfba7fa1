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
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import overload

from timetravel.explore.session_data import lineage
from timetravel.recording.catalog import EventBatchInfo
from timetravel.recording.format import FRAME_RAW_BYTES_MAX, RecordingError
from timetravel.recording.reader import RecordingReader
from timetravel.sim.encoding import DecodeError, unpack
from timetravel.sim.event import Event
from timetravel.tui.feed import EventTable

EVENT_FIELDS = 5
"""A recorded event is ``[t_ns, seq, dst, kind, payload]``."""
DECODED_BATCHES_KEPT = 2
"""Decoded batches a RecordedEvents keeps for the rows on screen."""
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
        self._cache: OrderedDict[int, list[Event]] = OrderedDict()
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
        return self._decoded(batch)[number - batch.first - 1]

    def _decoded(self, batch: EventBatchInfo) -> list[Event]:
        """A batch's events from this sequence's own small cache (the rows on screen need one or
        two batches; a bigger cache of decoded events slows every garbage collection)."""
        events = self._cache.get(batch.offset)
        if events is None:
            events = self.reader.events(batch)
            self._cache[batch.offset] = events
            while len(self._cache) > DECODED_BATCHES_KEPT:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(batch.offset)
        return events

    def fields(self) -> Iterator[tuple[int, str, str]]:
        """Each event's ``(t_ns, dst, kind)``, decoding each batch once and keeping none of it.

        The reader's own ``events`` keeps decoded batches in its cache; an index pass over a
        whole recording would fill it with millions of small objects that every full garbage
        collection then walks (hundreds of milliseconds, holding every thread). The stored bytes
        are kept instead (bytes are not tracked by the collector) and decoded again on demand.
        """
        for batch in self._batches:
            data = self.reader.events_bytes(batch)
            try:
                items = unpack(data, bytes_max=FRAME_RAW_BYTES_MAX)
            except DecodeError as error:
                raise RecordingError(
                    f"{self.reader.path}: event batch at offset {batch.offset}: {error}"
                ) from None
            if not isinstance(items, list) or len(items) != batch.count:
                raise RecordingError(f"{self.reader.path}: event batch at offset {batch.offset} is malformed")
            start = max(self.first - batch.first - 1, 0)
            stop = min(self.last - batch.first, batch.count)
            for item in items[start:stop]:
                if not (isinstance(item, list) and len(item) == EVENT_FIELDS):
                    raise RecordingError(f"{self.reader.path}: a recorded event is not a list of 5 fields")
                yield item[0], item[2], item[3]

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
        super().__init__(events, first_number=events.first, fields=events.fields())
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
