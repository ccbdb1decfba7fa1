"""Which nodes a seek's re-execution runs on, read from the recorded events before it starts.

A seek restores a snapshot and re-executes the recorded events up to the target. Under the
kernel's rule (a handler changes only its own node, the event's ``dst``; the rule copy-on-write
snapshots rely on), the nodes it can change are the ``dst`` of those events, which the recording
lists. The Session decodes exactly those afresh and shares every other node's decoded state
between seeks (recording/shared_nodes.py): at 10,000 ranks a seek re-executes events on a few
hundred to two thousand of them.

The answer is None — decode every node afresh, as before — whenever the recorded events do not
say for certain: the batches do not cover the range without gaps, or the events that run include the
last recorded one (the run may end there, and the scenario's end-of-run checks may change any node).
"""

from __future__ import annotations

import bisect

from timetravel.recording.catalog import EventBatchInfo
from timetravel.recording.reader import RecordingReader


def nodes_run(
    reader: RecordingReader,
    batches: list[EventBatchInfo],
    start: int,
    *,
    until_ns: int | None,
    events_max: int,
    end: int,
) -> set[str] | None:
    """The ``dst`` of recorded events #``start + 1`` .. #``events_max`` (those with ``t <= until_ns``,
    and the first one after it, to stay on the safe side), or None when that is not known for sure
    (see the module docstring). ``end``: the number of the last recorded event."""
    touched: set[str] = set()
    if events_max <= start:
        return touched
    firsts = [batch.first for batch in batches]
    position = bisect.bisect_right(firsts, start) - 1
    if position < 0:
        return None
    number = batches[position].first
    for batch in batches[position:]:
        if batch.first != number:
            return None  # a gap or an overlap between batches: do not guess
        for event in reader.events(batch):
            number += 1
            if number <= start:
                continue
            touched.add(event.dst)
            after_target = until_ns is not None and event.t > until_ns
            if number >= end and not after_target:
                return None
            if number >= events_max or after_target:
                return touched
    return None


__all__ = ["nodes_run"]
