"""The results of comparing two runs: where they first diverge, the state and metric differences,
and a replayed run against its recording.

Frozen dataclasses of plain values with ``to_data()`` like every explore result
(:mod:`timetravel.explore.results` holds the rest): ``compare``, ``diff`` and ``rerun`` return these,
and :func:`~timetravel.explore.divergence.first_divergence` a :class:`Divergence`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from timetravel.explore.results import public_failure


@dataclass(frozen=True)
class Divergence:
    """The first event whose effects differ between two runs, and the state diff there."""

    t_ns: int
    node: str
    kind: str
    seq_a: int | None
    seq_b: int | None
    event_a: int | None = None
    event_b: int | None = None
    reason: str = ""
    changes: tuple[dict[str, Any], ...] = ()
    event_t_ns: int | None = None
    """The diverging event's own time when ``t_ns`` is the scenario's moment instead (a torch run:
    ``t_ns`` is the completion of the first collective whose results differ; ``Scenario.divergence_t_ns``)."""

    def to_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "t_ns": self.t_ns,
            "node": self.node,
            "kind": self.kind,
            "seq_a": self.seq_a,
            "seq_b": self.seq_b,
            "event_a": self.event_a,
            "event_b": self.event_b,
        }
        if self.event_t_ns is not None:
            data["event_t_ns"] = self.event_t_ns
        return data

    def to_detail(self) -> dict[str, Any]:
        data = self.to_data()
        data.update(reason=self.reason, changes=list(self.changes))
        return data


@dataclass(frozen=True)
class RunSide:
    """One side of a comparison: a branch's name, outcome and failure."""

    name: str
    outcome: str
    failure: dict[str, Any] | None
    t_end_ns: int = 0

    def to_data(self) -> dict[str, Any]:
        return {"name": self.name, "outcome": self.outcome, "failure": public_failure(self.failure)}


@dataclass(frozen=True)
class MetricRow:
    """One row of compare's metric table: points on each side, last values, where they first differ."""

    name: str
    points_a: int
    points_b: int
    last_a: float | int | None
    last_b: float | int | None
    first_differs_ns: int | None
    """The first time the two curves differ (None: never)."""

    def to_data(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "points_a": self.points_a,
            "points_b": self.points_b,
            "last_a": self.last_a,
            "last_b": self.last_b,
            "first_differs_ns": self.first_differs_ns,
        }


@dataclass(frozen=True)
class CompareResult:
    a: RunSide
    b: RunSide
    first_divergence: Divergence | None
    metrics: dict[str, dict[str, list[list[Any]]]] = field(default_factory=dict)
    """``{metric: {"a": [[t_ns, value], ...], "b": [...]}}`` (values summed over nodes per time)."""
    diff: DiffCommandResult | None = None
    """The state diff at the first divergence (the moment and paths ``diff A B`` gives), or at the
    ends when the runs never diverge; None only for a divergence-only answer."""
    metric_rows: tuple[MetricRow, ...] = ()
    """The metric table the text shows (the JSON carries it too)."""
    reference: tuple[Any, ...] | None = None
    """``compare --reference FILE``: one :class:`~timetravel.explore.reference.ReferenceOverlay` per
    branch (a, b); None without a reference, and then the JSON has no ``reference`` key."""

    def to_data(self) -> dict[str, Any]:
        data = {
            "a": self.a.to_data(),
            "b": self.b.to_data(),
            "first_divergence": None if self.first_divergence is None else self.first_divergence.to_data(),
            "diff": None if self.diff is None else self.diff.to_data(),
            "metrics": [row.to_data() for row in self.metric_rows],
        }
        if self.reference is not None:
            data["reference"] = [overlay.to_data() for overlay in self.reference]
        return data


@dataclass(frozen=True)
class DiffEntry:
    path: str
    change: str
    summary: str

    def to_data(self) -> dict[str, Any]:
        return {"path": self.path, "change": self.change, "summary": self.summary}


@dataclass(frozen=True)
class DiffCommandResult:
    """``diff A B``: the state diff at one time (by default the first divergence, else the end)."""

    a: str
    b: str
    at_ns: int
    paths: tuple[DiffEntry, ...]
    omitted: int
    first_divergence: Divergence | None

    metrics: dict[str, dict[str, list[list[Any]]]] = field(default_factory=dict)
    """Both branches' metric curves, as in CompareResult (the TUI's loss pane after ``diff`` alone)."""
    moment: str = ""
    """Which moment ``at_ns`` is: ``first divergence``, ``--at`` or ``end`` (no divergence)."""
    ops: Any = None
    """With ``--ops`` (a torch run): the first differing ops, an :class:`~timetravel.explore.op_diff.OpsDiff`."""

    def to_data(self) -> dict[str, Any]:
        data = {
            "a": self.a,
            "b": self.b,
            "at_ns": self.at_ns,
            "moment": self.moment,
            "paths": [entry.to_data() for entry in self.paths],
            "omitted": self.omitted,
            "first_divergence": None if self.first_divergence is None else self.first_divergence.to_data(),
        }
        if self.ops is not None:
            data["ops"] = [op.to_data() for op in self.ops.ops]
            data["ops_trace"] = self.ops.to_data()
        return data


@dataclass(frozen=True)
class RerunResult:
    """The recorded inputs on today's code: its outcome, and where it first departs from the recording."""

    outcome: str
    failure: dict[str, Any] | None
    recorded_outcome: str
    recorded_failure: dict[str, Any] | None
    settings: tuple[str, ...]
    first_divergence: Divergence | None
    events: int = 0
    choices: str = "seed"
    """How the recorded choices were matched: ``log`` (the recording's choice log, pinned by site)
    or ``seed`` (no log: the recorded seed draws them again)."""
    faults_pinned: int = 0
    """Fault records of the recording's schedule pinned as an explicit schedule."""

    def to_data(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "failure": public_failure(self.failure),
            "recorded": {"outcome": self.recorded_outcome, "failure": public_failure(self.recorded_failure)},
            "settings": list(self.settings),
            "first_divergence": None if self.first_divergence is None else self.first_divergence.to_data(),
            "events": self.events,
            "choices": self.choices,
            "faults_pinned": self.faults_pinned,
        }
