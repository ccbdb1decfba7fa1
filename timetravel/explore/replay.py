"""Replay verification: compare a re-execution with what a recording says happened.

While events are re-executed, every chain batch the kernel flushes is compared with the digest the
recording stored for it; the open batch at the end of a seek is compared event by event. A
difference is a :class:`Mismatch` that names the first differing event and its cause:

* ``code_changed``: the code fingerprint of today's timetravel and scenario differs from the
  recording's (so a difference is expected: rerun, don't replay);
* ``platform``: the code is the same but the platform fingerprint (Python, numpy, CPU, OS)
  differs, and float results may legitimately differ;
* ``determinism_bug``: same code, same platform, different events: something in the scenario
  reads state the kernel does not control (a global, the wall clock, set order, ...).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from timetravel.recording.catalog import EventBatchInfo
from timetravel.recording.reader import RecordingReader
from timetravel.sim.encoding import pack
from timetravel.sim.event import Event
from timetravel.sim.fingerprint import code_fingerprint, platform_fingerprint
from timetravel.sim.scenario import Scenario

CAUSE_CODE_CHANGED = "code_changed"
CAUSE_PLATFORM = "platform"
CAUSE_DETERMINISM_BUG = "determinism_bug"
PAYLOAD_TEXT_CHARS_MAX = 120


@dataclass(frozen=True)
class Mismatch:
    """Where a replay first differed from its recording, and why that is likely."""

    what: str
    """``event`` (the event stream differs), ``state`` (a snapshot's state differs),
    ``initial_state`` (the scenario built another world) or ``outcome`` (the end differs)."""
    event: int | None
    """The first differing event number (#N), when known."""
    t_ns: int | None
    node: str | None
    kind: str | None
    detail: str
    cause: str
    recorded: dict[str, Any] | None = None
    replayed: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        where = f"event #{self.event}" if self.event is not None else "the recording"
        place = f" ({self.kind} to {self.node} at t={self.t_ns} ns)" if self.kind is not None else ""
        return f"replay differs at {where}{place}: {self.detail} [cause: {self.cause}]"


class ReplayDivergence(Exception):
    """A re-execution did not match its recording; ``mismatch`` says where and why."""

    def __init__(self, mismatch: Mismatch) -> None:
        super().__init__(mismatch.describe())
        self.mismatch = mismatch


def classify(header: dict[str, Any], scenario: Scenario) -> str:
    """Which of the three causes explains a mismatch (see the module docstring)."""
    if header.get("code_fingerprint") != code_fingerprint(scenario.build.__module__):
        return CAUSE_CODE_CHANGED
    if header.get("platform_fingerprint") != platform_fingerprint():
        return CAUSE_PLATFORM
    return CAUSE_DETERMINISM_BUG


def event_json(number: int, event: Event) -> dict[str, Any]:
    """An event as JSON-able fields (the payload as short text)."""
    payload = repr(event.payload)
    if len(payload) > PAYLOAD_TEXT_CHARS_MAX:
        payload = payload[: PAYLOAD_TEXT_CHARS_MAX - 3] + "..."
    return {
        "number": number,
        "t_ns": event.t,
        "seq": event.seq,
        "node": event.dst,
        "kind": event.kind,
        "payload": payload,
    }


class ChainVerifier:
    """Compares flushed chain batches with a recording's; keeps the first mismatch (never raises,
    because it runs inside the kernel's loop, where an exception would become a handler failure)."""

    def __init__(self, reader: RecordingReader, batches: list[EventBatchInfo], cause: str) -> None:
        self.reader = reader
        self.cause = cause
        self.by_first = {batch.first: batch for batch in batches if not batch.partial}
        self.partial = {batch.first: batch for batch in batches if batch.partial}
        self.mismatch: Mismatch | None = None
        self.batches_checked = 0
        self.batches_unverified = 0

    def on_chain_batch(self, first: int, events: list[Event], digest: bytes) -> None:
        if self.mismatch is not None:
            return
        recorded = self.by_first.get(first)
        if recorded is None:
            self.batches_unverified += 1
            return
        self.batches_checked += 1
        if recorded.digest != digest or recorded.count != len(events):
            self.mismatch = self.first_difference(recorded, events)

    def check_open_batch(self, first: int, events: list[Event]) -> None:
        """Compare the events of the still-open batch with the recorded batch that holds them."""
        if self.mismatch is not None or not events:
            return
        recorded = self.by_first.get(first) or self.partial.get(first)
        if recorded is None:
            self.batches_unverified += 1
            return
        if not _is_prefix(pack(events), self.reader.events_bytes(recorded)):
            self.mismatch = self.first_difference(recorded, events)

    def first_difference(self, recorded: EventBatchInfo, events: list[Event]) -> Mismatch:
        recorded_events = self.reader.events(recorded)
        for position, (want, got) in enumerate(zip(recorded_events, events, strict=False)):
            if pack(want) != pack(got):
                number = recorded.first + position + 1
                return Mismatch(
                    what="event",
                    event=number,
                    t_ns=got.t,
                    node=got.dst,
                    kind=got.kind,
                    detail=_event_difference(want, got),
                    cause=self.cause,
                    recorded=event_json(number, want),
                    replayed=event_json(number, got),
                )
        number = recorded.first + min(len(recorded_events), len(events)) + 1
        return Mismatch(
            what="event",
            event=number,
            t_ns=None,
            node=None,
            kind=None,
            detail=f"the batch after event #{recorded.first} holds {len(events)} events, recorded {recorded.count}",
            cause=self.cause,
        )


def _array_header_bytes(packed: bytes) -> int:
    """Length of the msgpack array header at the start of ``packed`` (fixarray, array16, array32)."""
    first = packed[0]
    if 0x90 <= first <= 0x9F:
        return 1
    return 3 if first == 0xDC else 5


def _is_prefix(partial: bytes, recorded: bytes) -> bool:
    """Whether a packed partial batch holds the first events of a packed recorded batch.

    Both are msgpack arrays of events; past their array headers, the events of the partial batch
    must be a byte-for-byte prefix of the recorded ones. No decoding is needed.
    """
    body = partial[_array_header_bytes(partial) :]
    start = _array_header_bytes(recorded)
    return recorded[start : start + len(body)] == body


def _event_difference(want: Event, got: Event) -> str:
    fields = [
        name for name, left, right in zip(Event._fields, want, got, strict=True) if pack(left) != pack(right)
    ]
    return f"recorded {want.kind} to {want.dst} at t={want.t} ns, replayed {got.kind} to {got.dst} at t={got.t} ns (fields differ: {', '.join(fields)})"
