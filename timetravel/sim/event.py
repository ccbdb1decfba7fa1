"""The event: plain data in the queue, ordered by (t, seq) and by nothing else.

``seq`` is a global counter assigned when the event is scheduled, so two events at the same
time run in the order they were scheduled, never in an order that depends on hashing or on
object identity. Because ``seq`` is unique, tuple comparison never looks past it, and the heap
never compares a payload.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple


class Event(NamedTuple):
    t: int
    """Logical time in integer nanoseconds at which the event is delivered."""
    seq: int
    """Global scheduling counter: the tie-break for equal ``t``."""
    dst: str
    """Name of the node whose handler receives the event."""
    kind: str
    """Handler selector, e.g. ``"ping"`` or ``"timer"``."""
    payload: Any
    """Plain data or a frozen numpy array; never a live object."""


make_event = tuple.__new__
"""Build an Event without the Python-level ``__new__`` (the hot loop's constructor)."""


def events_from_lists(values: list[Any], other: Callable[[Any], Event]) -> list[Event]:
    """Events from decoded stored events: one in the common form (a list of int, int, str, str and
    a payload) without a Python call, any other by ``other`` (which builds it or raises the
    caller's error). A first seek into a 10,000-rank snapshot builds ~10,000 queued events and a
    4,096-event batch this way; one call each cost more than the rest of their decoding."""
    events: list[Event] = []
    append = events.append
    for data in values:
        if (
            type(data) is list
            and len(data) == 5
            and type(data[0]) is int
            and type(data[1]) is int
            and type(data[2]) is str
            and type(data[3]) is str
        ):
            append(make_event(Event, data))
        else:
            append(other(data))
    return events


def event_from_data(data: list[Any] | tuple[Any, ...]) -> Event:
    """An Event from its decoded list form, with its fields checked (decoded data is untrusted)."""
    if len(data) != 5:
        raise ValueError(f"an event has 5 fields, got {len(data)}")
    t, seq, dst, kind, payload = data
    if not (isinstance(t, int) and isinstance(seq, int) and isinstance(dst, str) and isinstance(kind, str)):
        raise ValueError(f"event fields have the wrong types: {data[:4]!r}")
    return Event(t, seq, dst, kind, payload)
