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

SHARED_NODES_MIN = 4096
"""Worlds of fewer nodes restore every node afresh. Sharing pays where a full restore is large and a
seek runs few of the nodes: a 10,000-rank snapshot takes 0.6-1 s to decode and a seek runs 850-1,800
ranks. A 1,024-node gossip snapshot decodes in ~12 ms, a seek runs most of its nodes, and its 125
snapshots are rarely revisited: there the shared states only grew what the garbage collector walks
(p50 of 100 random seeks 85-134 ms against 59-86 ms without sharing, measured side by side)."""
SHARED_TOUCHED_FRACTION_MAX = 0.5
"""A seek that runs more than this fraction of the nodes restores every node afresh."""


def worth_sharing(nodes: int, touched: set[str] | None) -> bool:
    """Whether a seek over a world of ``nodes`` nodes that runs ``touched`` should share the rest."""
    return (
        touched is not None
        and nodes >= SHARED_NODES_MIN
        and len(touched) <= SHARED_TOUCHED_FRACTION_MAX * nodes
    )


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


__all__ = ["SHARED_NODES_MIN", "SHARED_TOUCHED_FRACTION_MAX", "nodes_run", "worth_sharing"]
