"""Recording's compiled code (timetravel/recording/_speedups.c) does what its Python reference does.

``blob_entries`` checks a BLOBS frame as catalog.check_blob_entry checks it (and hands anything
else back to it); ``untrack`` and ``untrack_events`` take the read-only plain data the reader and
a Session's shared states keep out of the cyclic collector's reach and change nothing else
(without them, the data stays tracked: recording/reader.py ``kept_untracked``).
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
import pytest

from timetravel.recording import speedups
from timetravel.recording.catalog import check_blob_entry
from timetravel.sim.encoding import pack
from timetravel.sim.event import Event

pytestmark = pytest.mark.skipif(speedups.compiled is None, reason="recording's compiled code is not built")


def test_a_blobs_frames_entries_are_checked_as_the_catalog_checks_them() -> None:
    assert speedups.compiled is not None
    check = speedups.compiled.blob_entries
    digest, base = b"d" * 16, b"b" * 16
    entries = [
        [digest, 0, 0, None, 0, b"value"],
        [b"p" * 16, 2, 2, base, 4, b"page"],
        [digest, 1, 0, None, 0, b"x"],
    ]
    expected: dict[bytes, Any] = {}
    for raw in entries:
        entry = check_blob_entry(raw)
        expected[entry[0]] = entry
    by_digest, size = check(entries)
    assert by_digest == expected and size == sum(len(raw[5]) + 100 for raw in entries)
    # kept for later seeks, they are out of the cyclic collector's lists (bytes, ints and None only)
    assert not gc.is_tracked(by_digest) and not any(gc.is_tracked(entry) for entry in by_digest.values())
    # anything the plain case does not cover goes to the Python check (which accepts or refuses it)
    unusual = [[digest, True, 0, None, 0, b""], [digest, 1.0, 0, None, 0, b""], [digest, 3, 0, None, 0, b""]]
    unusual += [
        [digest, 0, 0, b"short", 0, b""],
        [digest, 0, 0, None, 0, "str"],
        (digest, 0, 0, None, 0, b""),
    ]
    unusual += [[b"short", 0, 0, None, 0, b""], [digest, 0, 0, None, 0]]
    for raw in unusual:
        assert check([raw]) is NotImplemented
    assert check(("not", "a list")) is NotImplemented


def test_kept_events_and_their_payloads_leave_the_collectors_reach_unchanged() -> None:
    class WithDict(tuple):
        """A tuple subclass with a __dict__: left tracked."""

    assert speedups.compiled is not None
    untrack_events = speedups.compiled.untrack_events
    events: list[Any] = [Event(10, 1, "r0", "grad", [1, {"a": [2]}]), Event(20, 2, "r1", "tick", None)]
    other = WithDict((1, [2]))
    before = [tuple(event) for event in events]
    assert all(gc.is_tracked(event) for event in events[:1]) and gc.is_tracked(other)
    assert untrack_events([*events, other]) >= 4  # the first event, its list, dict and inner list
    assert [tuple(event) for event in events] == before and type(events[0]) is Event
    assert not any(gc.is_tracked(event) for event in events)
    payload = events[0].payload
    assert not gc.is_tracked(payload) and not gc.is_tracked(payload[1]) and not gc.is_tracked(payload[1]["a"])
    assert gc.is_tracked(other) and gc.is_tracked(other[1])
    with pytest.raises(TypeError):
        untrack_events(tuple(events))


def test_untrack_takes_plain_data_out_of_the_collector_and_changes_nothing_else() -> None:
    """recording/shared_nodes.py untracks the shared decoded states; their bits must not move."""
    compiled = speedups.compiled
    assert compiled is not None
    inner: list[Any] = [1, "a", None]
    event = Event(5, 1, "n", "k", [1])
    array = np.arange(3)
    value = {"gpu": {"streams": {"compute": {"queue": [inner, {"x": []}]}}}, "pair": (inner, 2), "e": event}
    value["array"] = array
    before = pack(value)
    containers = [value, value["gpu"], value["gpu"]["streams"], value["gpu"]["streams"]["compute"]]
    containers += [value["gpu"]["streams"]["compute"]["queue"], inner, value["pair"]]
    assert all(gc.is_tracked(item) for item in containers if not isinstance(item, dict) or item is value)
    counted = compiled.untrack(value)
    assert counted >= 5
    assert not any(gc.is_tracked(item) for item in containers)
    assert gc.is_tracked(event) and gc.is_tracked(event.payload)  # a tuple subclass is not plain data
    assert pack(value) == before and value["array"] is array
    assert compiled.untrack(value) == 0  # already out: nothing to do
    value["gpu"]["late"] = [object()]
    assert gc.is_tracked(value["gpu"])  # CPython tracks a dict again when it is given a tracked item
    cyclic: list[Any] = [{"x": []}]
    cyclic.append(cyclic)
    assert compiled.untrack(cyclic) == 3  # ends: each container is entered once
    cyclic.clear()
