"""The structured results of every explore action: what the engine returns and front ends render.

Each result is a frozen dataclass of plain values with ``to_data()``, the JSON object that
``--json`` prints and that scripts rely on. The engine's functions (``branch``, ``fanout``,
``first_divergence``, ...) return these, and so do the commands of the command language, so a
front end never sees two shapes of one answer. Rendering to text lives in
:mod:`timetravel.explore.commands.render`; rich rendering belongs to the TUI and the shell.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from timetravel.sim.failure import PUBLIC_FIELDS, failure_fields


def public_failure(failure: dict[str, Any] | None) -> dict[str, Any] | None:
    """The failure as a result shows it: kind, node, t_ns, message, signature and every other field
    the detector recorded (a run's own record has them; a recording's END frame keeps the five)."""
    if failure is None:
        return None
    fields = failure_fields(failure)
    assert fields is not None
    return {**{key: failure.get(key) for key in PUBLIC_FIELDS}, **fields}


@dataclass(frozen=True)
class WatchValue:
    """A watched path (or predicate) and its value at the cursor, summarized."""

    expression: str
    value: str
    changed: bool = False

    def to_data(self) -> dict[str, Any]:
        return {"expression": self.expression, "value": self.value, "changed": self.changed}


@dataclass(frozen=True)
class CursorResult:
    """Where the cursor stands (goto, step, back, where): branch, time, event number, failure."""

    branch: str
    t_ns: int
    event: int
    """Events processed so far on this branch (``#N`` addresses the state after event N)."""
    events_total: int
    t_end_ns: int
    failure: dict[str, Any] | None
    next_event: dict[str, Any] | None = None
    watches: tuple[WatchValue, ...] = ()
    in_progress: bool = False
    """The recording is still being written: the run does not end at ``t_end_ns`` (yet)."""
    collective: dict[str, Any] | None = None
    """After ``step --collective`` / ``back --collective``: the collective the event the cursor
    stands after completed (op, key, group, seq, t_done_ns, completed so far)."""
    note: str | None = None
    """A sentence about the move (``step --collective 5`` when only 3 more complete)."""

    @property
    def failure_reached(self) -> bool:
        """The branch's failure holds at the cursor: its time is reached, or the cursor is at the end
        of a finished branch — a hang is reported at the wait's start + hang_timeout, after the last
        event, and nothing happens in between, so the end of the branch *is* the hang."""
        if self.failure is None:
            return False
        at_end = self.event >= self.events_total and not self.in_progress
        return at_end or int(self.failure.get("t_ns") or 0) <= self.t_ns

    def to_data(self) -> dict[str, Any]:
        data = {
            "branch": self.branch,
            "in_progress": self.in_progress,
            "t_ns": self.t_ns,
            "event": self.event,
            "events_total": self.events_total,
            "t_end_ns": self.t_end_ns,
            "failure": public_failure(self.failure),
            "next_event": self.next_event,
            "watches": [watch.to_data() for watch in self.watches],
        }
        if self.collective is not None:
            data["collective"] = dict(self.collective)
        if self.note is not None:
            data["note"] = self.note
        return data


@dataclass(frozen=True)
class EventRow:
    """One processed event as a row of the event log."""

    number: int
    t_ns: int
    dst: str
    kind: str
    payload: str

    def to_data(self) -> dict[str, Any]:
        return {
            "number": self.number,
            "t_ns": self.t_ns,
            "dst": self.dst,
            "kind": self.kind,
            "payload": self.payload,
        }


@dataclass(frozen=True)
class EventsResult:
    branch: str
    rows: tuple[EventRow, ...]
    cursor_event: int
    omitted: int = 0

    def to_data(self) -> dict[str, Any]:
        return {
            "branch": self.branch,
            "cursor_event": self.cursor_event,
            "events": [row.to_data() for row in self.rows],
            "omitted": self.omitted,
        }


@dataclass(frozen=True)
class ValueEntry:
    """One line of a printed subtree: a path, the kind of value there and a short summary."""

    path: str
    kind: str
    summary: str
    depth: int = 0

    def to_data(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "summary": self.summary, "depth": self.depth}


@dataclass(frozen=True)
class PrintResult:
    branch: str
    t_ns: int
    path: str
    entries: tuple[ValueEntry, ...]
    omitted: int = 0

    def to_data(self) -> dict[str, Any]:
        return {
            "branch": self.branch,
            "t_ns": self.t_ns,
            "path": self.path,
            "entries": [entry.to_data() for entry in self.entries],
            "omitted": self.omitted,
        }


@dataclass(frozen=True)
class WatchResult:
    """The watch list, and where the cursor moved when asked for the previous or next change."""

    watches: tuple[WatchValue, ...]
    moved: CursorResult | None = None
    found: bool = True
    message: str = ""

    def to_data(self) -> dict[str, Any]:
        return {
            "watches": [watch.to_data() for watch in self.watches],
            "moved": None if self.moved is None else self.moved.to_data(),
            "found": self.found,
            "message": self.message,
        }


@dataclass(frozen=True)
class FindResult:
    """The first moment a predicate holds (find-first), or the last or next change of a path."""

    expression: str
    branch: str
    found: bool
    t_ns: int | None = None
    event: int | None = None
    witnesses: tuple[str, ...] = ()
    replayed_events: int = 0
    """Events re-executed event by event after bisecting the snapshots (the search's cost)."""
    node: str | None = None
    kind: str | None = None
    """The event at that moment: where it went and its kind (``end``: the end-of-run checks)."""
    strategy: str = ""
    """bisect, scan (find-first), last-change or next-change (watchpoints); see explore/search.py."""
    snapshots_checked: int = 0
    stopped_by: str | None = None
    """Why the search stopped without an answer (``events_max``, ``cancelled``); None: it finished."""

    def to_data(self) -> dict[str, Any]:
        return {
            "expression": self.expression,
            "branch": self.branch,
            "found": self.found,
            "t_ns": self.t_ns,
            "event": self.event,
            "node": self.node,
            "kind": self.kind,
            "witnesses": list(self.witnesses),
            "replayed_events": self.replayed_events,
            "snapshots_checked": self.snapshots_checked,
            "strategy": self.strategy,
            "stopped_by": self.stopped_by,
        }


@dataclass(frozen=True)
class BranchResult:
    """A future run from ``at_ns`` of ``parent`` with ``changes`` (JSON: name, parent, at_ns, outcome, failure)."""

    name: str
    parent: str
    at_ns: int
    outcome: str
    failure: dict[str, Any] | None
    changes: tuple[str, ...] = ()
    t_end_ns: int = 0
    events: int = 0

    def to_data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "parent": self.parent,
            "at_ns": self.at_ns,
            "outcome": self.outcome,
            "failure": public_failure(self.failure),
        }


@dataclass(frozen=True)
class BranchesResult:
    branches: tuple[BranchResult, ...]
    current: str = "main"

    def to_data(self) -> dict[str, Any]:
        rows = []
        for branch in self.branches:
            row = branch.to_data()
            row.update(changes=list(branch.changes), t_end_ns=branch.t_end_ns, events=branch.events)
            rows.append(row)
        return {"current": self.current, "branches": rows}


@dataclass(frozen=True)
class FanoutResult:
    """Futures from one moment: the failure rate and how the failures bucket by signature."""

    at_ns: int
    samples: int
    failure_rate: float
    by_signature: dict[str, int]
    """``{signature: count}``; passing futures are counted under ``"pass"``."""
    keys: dict[str, tuple[int, ...]] = field(default_factory=dict)
    """``{signature: branch keys}``: which futures ended so (``branch --branch-seed K`` is one)."""
    samples_requested: int = 0
    """How many futures were asked for (0: as many as ran); fewer ran when the work was stopped."""

    @property
    def stopped(self) -> bool:
        """The fan-out was stopped (escape, Ctrl-C) before all the futures asked for had run."""
        return self.samples < self.samples_requested

    def to_data(self) -> dict[str, Any]:
        return {
            "at_ns": self.at_ns,
            "samples": self.samples,
            "failure_rate": self.failure_rate,
            "by_signature": dict(self.by_signature),
            "samples_requested": max(self.samples_requested, self.samples),
            "stopped": self.stopped,
        }


@dataclass(frozen=True)
class LikelihoodResult:
    """The fan-out failure rate at every snapshot along a run, and where it reaches 1."""

    branch: str
    samples: int
    points: tuple[FanoutResult, ...]
    point_of_no_return_ns: int | None
    """The earliest snapshot time from which every sampled future fails (None if none)."""

    def to_data(self) -> dict[str, Any]:
        return {
            "branch": self.branch,
            "samples": self.samples,
            "points": [point.to_data() for point in self.points],
            "point_of_no_return_ns": self.point_of_no_return_ns,
        }


@dataclass(frozen=True)
class FaultsResult:
    branch: str
    faults: tuple[dict[str, Any], ...]

    def to_data(self) -> dict[str, Any]:
        return {"branch": self.branch, "faults": [dict(fault) for fault in self.faults]}


@dataclass(frozen=True)
class ExportResult:
    path: str
    format: str
    trace_events: int
    bytes_written: int
    events: int = 0
    """Simulation events the trace covers (all of the branch unless ``truncated``)."""
    kernels: int = 0
    messages: int = 0
    faults: int = 0
    truncated: bool = False
    collectives: int | None = None
    """A torch run's collective slices (one per rank and collective); None: the world has none."""
    optimizer_steps: int = 0

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "path": self.path,
            "format": self.format,
            "trace_events": self.trace_events,
            "bytes": self.bytes_written,
            "events": self.events,
            "kernels": self.kernels,
            "messages": self.messages,
            "faults": self.faults,
            "truncated": self.truncated,
        }
        if self.collectives is not None:
            data.update(collectives=self.collectives, optimizer_steps=self.optimizer_steps)
        return data


@dataclass(frozen=True)
class HelpEntry:
    name: str
    usage: str
    summary: str

    def to_data(self) -> dict[str, Any]:
        return {"name": self.name, "usage": self.usage, "summary": self.summary}


@dataclass(frozen=True)
class HelpResult:
    entries: tuple[HelpEntry, ...]
    detail: str = ""

    def to_data(self) -> dict[str, Any]:
        return {"commands": [entry.to_data() for entry in self.entries], "detail": self.detail}
