"""What a torch run's World took from outside itself, kept so that a recorded run re-executes without
its rank processes (coordinator side).

The World is a function of what its rank processes sent and of its own arithmetic over tensors. A
recording stores the first as a **journal** (JOURNAL frames, one per chain batch): for every poll of a
rank the messages it read (``["poll", rank, messages, ended]``), and for every array the World
computed from tensors' bytes (a reduction, a flipped bit, a reassembled shard) that array's
description (``["computed", ordinal, value]``) — each keyed by the event's ``seq``. A tensor in a
message or a computed value is kept as its description (dtype, shape, page digests, xxh3-64, non-finite
elements: ``arrays.describe``), whole below SNAPSHOT_ELIDE_BYTES_MIN bytes.

A Session seeks by re-executing recorded events from the journal (:class:`ReplayedHost`, the host of a
*replayed* run): no rank process runs, the World's large tensors are elided arrays (sim/elided.py) with
the digests of the recorded ones, and every chain batch is checked against the recording as always.
What needs tensors' values (``print`` of a parameter, a diff of a collective's inputs) is rebuilt by
re-executing the ranks (world_source.py). This is what rr does: record what cannot be recomputed,
re-execute the rest.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from timetravel.sim.elided import ElidedArray
from timetravel.sim.event import Event
from timetravel.torch.protocol import arrays
from timetravel.torch.protocol.limits import SNAPSHOT_ELIDE_BYTES_MIN
from timetravel.torch.protocol.wire import ChannelClosed, ProtocolError
from timetravel.torch.world import collectives

JOURNAL_RECORDS_MAX = 1_000_000
"""Records a live journal holds before the recorder takes them (it takes them every chain batch)."""
JOURNAL_DEPTH_MAX = 32
"""Nesting of a message or value turned into journal form (messages are a few levels deep)."""


class JournalMissing(RuntimeError):
    """A replayed event needs a journal record the recording does not have (it is damaged, or was
    recorded without a journal): the event is re-executed with its ranks instead."""


def journal_form(value: Any, depth: int = 0) -> Any:
    """``value`` (a message, a computed value) with every tensor as its description, whole below
    SNAPSHOT_ELIDE_BYTES_MIN bytes: plain data a JOURNAL frame holds. A tensor in wire form gets its
    summary (``digest``, ``nonfinite``) written into the wire dict too, so the World does not read
    its bytes a second time (``arrays.decode_summarized``)."""
    if depth > JOURNAL_DEPTH_MAX:
        raise ProtocolError("a message nested too deep to journal")
    if isinstance(value, (np.ndarray, ElidedArray)):
        return _tensor(value)
    if isinstance(value, dict):
        if _is_wire(value):
            if "data" not in value:  # described already (a state step's tensors: rank/state.py)
                return dict(value)
            described = _tensor(arrays.decode(value))
            if "digest" in described:  # the poll's World reads them from here (ranks._post_inputs)
                value["digest"], value["nonfinite"] = described["digest"], described["nonfinite"]
            return described
        return {key: journal_form(item, depth + 1) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [journal_form(item, depth + 1) for item in value]
    return value


def _is_wire(value: dict[str, Any]) -> bool:
    return "dtype" in value and "shape" in value and ("data" in value or "pages" in value)


def _tensor(array: np.ndarray | ElidedArray) -> dict[str, Any]:
    if isinstance(array, np.ndarray) and array.nbytes <= SNAPSHOT_ELIDE_BYTES_MIN:
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8).tobytes()
        return {"dtype": arrays.dtype_name(array), "shape": list(array.shape), "data": data, "whole": True}
    return arrays.describe(array)


def replayed_form(value: Any) -> Any:
    """A journal-form computed value as the World holds it: descriptions as elided arrays, whole
    tensors as (read-only) arrays."""
    if isinstance(value, dict):
        if _is_wire(value):
            return arrays.decode({key: item for key, item in value.items() if key != "whole"})
        return {key: replayed_form(item) for key, item in value.items()}
    if isinstance(value, list):
        return [replayed_form(item) for item in value]
    return value


def messages_form(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Journal-form messages as a poll hands them on: tensors stay in wire or description form
    (``arrays.decode`` reads both), whole tensors as wire."""
    return [_message(message) for message in messages]


def _message(value: Any) -> Any:
    if isinstance(value, dict):
        if _is_wire(value):
            return {key: item for key, item in value.items() if key != "whole"}
        return {key: _message(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_message(item) for item in value]
    return value


def ended_form(ended: BaseException | None) -> list[Any] | None:
    """How a poll's channel ended, as data: None, ["closed"], ["protocol", why], ["stuck", why]."""
    if ended is None:
        return None
    if isinstance(ended, ChannelClosed):
        return ["closed", str(ended)]
    if isinstance(ended, ProtocolError):
        return ["protocol", str(ended)]
    return ["stuck", str(ended)]


def ended_of(form: Any) -> BaseException | None:
    if form is None:
        return None
    kind, why = form[0], form[1] if len(form) > 1 else ""
    if kind == "closed":
        return ChannelClosed(why)
    if kind == "protocol":
        return ProtocolError(why)
    from timetravel.torch.world.driver import RankStuck

    return RankStuck(why)


def _not_reduced(reduce_op: str, tensors: list[Any]) -> None:
    """A replay does not reduce: the recorded outputs replace what ``collectives.outputs`` built."""
    return None


class Journal:
    """A live run's journal, taken by the recorder batch by batch (recording/recorder.py)."""

    def __init__(self) -> None:
        self.records: list[list[Any]] = []
        self._computed: tuple[int, int] = (-1, 0)

    def poll(
        self, event: Event, rank: int, messages: list[dict[str, Any]], ended: BaseException | None
    ) -> None:
        self._add([event[1], "poll", [rank, journal_form(messages), ended_form(ended)]])

    def computed(self, event: Event, value: Any) -> None:
        seq = event[1]
        ordinal = self._computed[1] + 1 if self._computed[0] == seq else 0
        self._computed = (seq, ordinal)
        self._add([seq, "computed", [ordinal, journal_form(value)]])

    def _add(self, record: list[Any]) -> None:
        if len(self.records) >= JOURNAL_RECORDS_MAX:
            raise RuntimeError(f"a journal of more than {JOURNAL_RECORDS_MAX} records was never taken")
        self.records.append(record)

    def take(self) -> list[list[Any]]:
        taken, self.records = self.records, []
        return taken


class ReplayedHost:
    """The host of a run re-executed from its journal: it hands polls the recorded messages and
    computations their recorded results, and carries out nothing (no rank process runs)."""

    def __init__(self, frames: Callable[[], Iterator[list[list[Any]]]], launch: Any) -> None:
        """``frames()``: the records of the recording's JOURNAL frames, frame by frame from the one
        the re-execution starts in (read as the re-execution needs them)."""
        self.polls: dict[tuple[int, int], list[Any]] = {}
        self.computed_values: dict[tuple[int, int], Any] = {}
        self._frames = frames
        self._unread: Iterator[list[list[Any]]] | None = None
        self.launch = launch
        self.references: dict[str, dict[str, Any]] = {}
        """Reference runs (world/reference.py) this replay started: a run's end re-executed from the
        journal checks silent_corruption and resume_mismatch as the recorded run did."""
        self.probe = None
        self.state_pulls = None
        self._computed: tuple[int, int] = (-1, 0)

    def take_messages(
        self, world: Any, event: Event, rank: int, delivery: int | None
    ) -> tuple[list[dict[str, Any]], BaseException | None]:
        key = (event[1], rank)
        while key not in self.polls and self._read_more():
            pass
        recorded = self.polls.pop(key, None)
        if recorded is None:
            raise JournalMissing(f"no journal record of r{rank}'s poll at seq {event[1]}")
        return messages_form(recorded[1]), ended_of(recorded[2])

    def _read_more(self) -> bool:
        """Read the next JOURNAL frame's records; False when none is left."""
        if self._unread is None:
            self._unread = self._frames()
        records = next(self._unread, None)
        if records is None:
            return False
        for seq, kind, data in records:
            if len(self.polls) + len(self.computed_values) >= JOURNAL_RECORDS_MAX:
                raise JournalMissing(f"a replay held more than {JOURNAL_RECORDS_MAX} journal records")
            if kind == "poll":
                self.polls[(int(seq), int(data[0]))] = data
            elif kind == "computed":
                self.computed_values[(int(seq), int(data[0]))] = data[1]
        return True

    def complete(self, event: Event, entries: list[dict[str, Any]], size: int, reduce_order: str) -> Any:
        """What ``collectives.complete`` decides from the entries' skeletons (agreement, the bytes
        moved), with the outputs the recorded run computed."""
        done = collectives.complete(entries, size, reduce_order, reduce=_not_reduced)
        if done.outputs is None:
            return done
        recorded = self.computed(event, lambda: None)
        outputs = {int(index): list(arrays_) for index, arrays_ in recorded.items()}
        return dataclasses.replace(done, outputs=outputs)

    def computed(self, event: Event, compute: Callable[[], Any]) -> Any:
        seq = event[1]
        ordinal = self._computed[1] + 1 if self._computed[0] == seq else 0
        self._computed = (seq, ordinal)
        while (seq, ordinal) not in self.computed_values and self._read_more():
            pass
        recorded = self.computed_values.pop((seq, ordinal), None)
        if recorded is None:
            raise JournalMissing(f"no journal record of a computation at seq {seq}")
        return replayed_form(recorded)

    def state_step_polled(self, world: Any, rank: int, step: int) -> None:
        """Nothing to pull: no rank process runs."""

    def carry_out(self, world: Any, orders: list[list[Any]]) -> None:
        """Nothing to carry out: no rank process runs."""

    def stop_world(self, world: Any) -> None:
        """Nothing to stop."""

    def close(self) -> None:
        """Nothing to close."""
