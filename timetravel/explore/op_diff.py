"""``diff A B --ops``: the first torch ops whose outputs differ between two branches of a torch run.

The World sees a torch run's ranks only at their collectives; the first differing collective
(:mod:`.divergence`) says *where* two branches part, not which computation inside the step first
computed another value. So ``first_differing_ops`` re-executes, on both branches, the optimizer step
in which they first differ — the step in progress, at the first divergence, on the first rank whose
collective digests differ — with every rank's ops hashed as they run (torch/rank/op_trace.py; only
in these re-executions: recording costs what it did), and compares them:

1. **Which step**: the first divergence (both branches bisected and stepped, :mod:`.divergence`);
   at it, the first rank whose last collective's digests differ, and the optimizer step in progress
   there (``step``).
2. **Trace**: each branch is re-executed from its latest snapshot where every rank waits (or has not
   started) having completed at most ``step - 2`` optimizer steps — a rank's process may run one
   result ahead of the World, so it cannot be inside ``step`` yet — and every rank is asked to hash
   its ops of ``step`` (from #0, on main, when no snapshot will do). When a branch forks inside the
   step (or just before it), no snapshot of it will do: both branches are then re-executed to the
   later fork, every rank run to its next wait there and asked to hash from where it stands (the
   ops before are one history on both sides; occurrences count from there). Every re-executed event
   is checked against the recorded hash chain: the trace only reads.
3. **Match** ops between the branches by (rank, module, op, occurrence) — not by position, so an
   extra op on one side shifts nothing — and order those whose outputs differ as they executed: by
   the rank's logical time, then (at one time, as every member of a collective receives its result
   at once) the ranks a fault differing between the branches targets first, then the rank, then its
   order of execution.
4. **Values**: both branches are re-executed once more, capturing the outputs of the first
   ``OPS_COMPARED_MAX`` differing ops, whose max abs difference and max ULP distance are computed here.

For a fault in a collective the first op is the collective on the rank it hit (``c10d::all_reduce``);
for an arrival-order branch, the reduction whose sum changed; then the ops it fed. ``compile=inductor``
is out of scope (the compiled graph's ops are not Python-dispatched one by one).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from timetravel.explore.array_diff import summarize_arrays
from timetravel.explore.compare_results import Divergence
from timetravel.explore.explain_torch import execution_refusal, is_torch, resumable_worlds
from timetravel.explore.session import Session
from timetravel.explore.stepper import Stepper, stepper_at
from timetravel.explore.tracks import track_on
from timetravel.explore.work import ExploreError, ProgressCallback, WorkProgress

OPS_COMPARED_MAX = 16
"""Differing ops whose values are captured and compared (the first ones in execution order)."""
OPS_LISTED_MAX = 256
"""Differing ops listed at most (digests only past OPS_COMPARED_MAX)."""
ADVANCE_EVENTS = 64
"""Events re-executed between two looks at whether every rank finished the traced step."""


@dataclass(frozen=True)
class OpDifference:
    """One op whose outputs differ between the branches (or that ran on one side only)."""

    rank: str
    step: int
    module: str
    """The module's fully qualified name ('' outside any module; ``<name> (backward)`` in backward)."""
    op: str
    """``aten::mm``, or the collective (``c10d::all_reduce``)."""
    occurrence: int
    """How many times this module ran this op before in the step, on this rank."""
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    t_ns: int
    """The rank's logical time when the op ran (on side a; b's when only b ran it)."""
    index_a: int | None
    index_b: int | None
    """Its position in the rank's ops of the step on each side (None: it did not run there)."""
    max_abs_diff: float | None = None
    max_ulp: int | None = None
    differing: int | None = None
    """Elements whose bits differ (None: values not compared)."""
    elements: int | None = None
    note: str = ""

    def to_data(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "step": self.step,
            "module": self.module,
            "op": self.op,
            "occurrence": self.occurrence,
            "shapes": [list(shape) for shape in self.shapes],
            "dtypes": list(self.dtypes),
            "t_ns": self.t_ns,
            "index_a": self.index_a,
            "index_b": self.index_b,
            "max_abs_diff": self.max_abs_diff,
            "max_ulp": self.max_ulp,
            "differing": self.differing,
            "elements": self.elements,
            "note": self.note,
        }


@dataclass(frozen=True)
class OpsDiff:
    """What ``--ops`` found: the step it re-executed, and the differing ops in execution order."""

    step: int
    ops: tuple[OpDifference, ...]
    compared: int
    """Ops matched between the branches (on every rank)."""
    differing: int
    """How many of them (and ops that ran on one side only) differ; ``ops`` lists the first."""
    start_a: int
    start_b: int
    """The events the traces re-executed from on each branch."""
    note: str = ""
    ranks: tuple[str, ...] = field(default_factory=tuple)

    def to_data(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "compared": self.compared,
            "differing": self.differing,
            "start_a": self.start_a,
            "start_b": self.start_b,
            "note": self.note,
        }


def first_differing_ops(
    session: Session,
    a: str,
    b: str,
    divergence: Divergence | None,
    progress: ProgressCallback | None = None,
) -> OpsDiff:
    """See the module docstring."""
    if not is_torch(session):
        raise ExploreError(f"--ops re-executes a torch script's ops: {session.scenario.name} has none")
    refusal = execution_refusal(session)
    if refusal is not None:
        raise ExploreError(f"--ops re-executes the step on both branches: {refusal}")
    if divergence is None:
        return OpsDiff(0, (), 0, 0, 0, 0, "the branches never diverge: no step to re-execute")
    step, faulted = _divergent_step(session, a, b, divergence)
    at: int | None = None
    _report(progress, f"--ops: hashing every rank's ops of step {step} on {a} and {b}")
    try:
        traces = {side: _trace(session, name, step, None, None) for side, name in (("a", a), ("b", b))}
    except _NoWholeStep:
        # a branch forks inside the step (or right before it): both from the later fork, where each
        # rank stands; what ran before it is the same history on both sides
        at = max(_fork(session, a), _fork(session, b))
        _report(progress, f"--ops: hashing every rank's ops of step {step} from #{at} on {a} and {b}")
        traces = {side: _trace(session, name, step, None, at) for side, name in (("a", a), ("b", b))}
    ops_a, ops_b = traces["a"]["probe"].ops, traces["b"]["probe"].ops
    found, compared = differing_ops(ops_a, ops_b, faulted)
    first = found[:OPS_COMPARED_MAX]
    capture: dict[int, list[list[Any]]] = {}
    for rank, module, op, occurrence, _record_a, _record_b in first:
        capture.setdefault(rank, []).append([module, op, occurrence])
    values = {}
    for side, name in (("a", a), ("b", b)):
        _report(progress, f"--ops: capturing the first {len(first)} differing ops' outputs on {name}")
        values[side] = _trace(session, name, step, capture, at)["probe"].values if capture else {}
    listed = tuple(
        _ended_there(
            _difference(step, item, values["a"], values["b"], compare=position < OPS_COMPARED_MAX),
            {"a": (a, _failure_kind(session, a)), "b": (b, _failure_kind(session, b))},
        )
        for position, item in enumerate(found[:OPS_LISTED_MAX])
    )
    note = ""
    if at is not None:
        note = (
            f"a branch forks inside the step: both were traced from #{at}, each rank from its next wait "
            "on (the ops before it are one history); occurrences count from there"
        )
    return OpsDiff(
        step,
        listed,
        compared,
        len(found),
        traces["a"]["start"],
        traces["b"]["start"],
        note,
        tuple(f"r{rank}" for rank in sorted(set(ops_a) | set(ops_b))),
    )


def _failure_kind(session: Session, name: str) -> str | None:
    """The kind of the failure branch ``name`` ended in (None: it passed)."""
    with track_on(session, name) as track:
        failure = track.info.failure
        return None if failure is None else str(failure.get("kind"))


def _ended_there(difference: OpDifference, sides: dict[str, tuple[str, str | None]]) -> OpDifference:
    """A collective that returned on one side only, where the other side's run failed: the failure
    stopped that run at it (a detector fires as the collective completes: a divergence of what its
    members received, a nan), so the rank never received its result there."""
    if not difference.op.startswith("c10d::") or not difference.note.startswith("ran on "):
        return difference
    missing = "a" if difference.index_a is None else "b"
    name, kind = sides[missing]
    if kind is None:
        return difference
    return _replace(
        difference,
        note=f"{difference.note}: the run on {name} failed ({kind}) before {difference.rank} received its result",
    )


def _fork(session: Session, name: str) -> int:
    with track_on(session, name) as track:
        return track.fork_events


def _report(progress: ProgressCallback | None, text: str) -> None:
    if progress is not None:
        progress(WorkProgress("diff", 0, 1, text))


# -- 1. which step ------------------------------------------------------------------------------------


def _divergent_step(session: Session, a: str, b: str, divergence: Divergence) -> tuple[int, set[int]]:
    """The optimizer step in progress, at the divergence, on the first rank whose collective digests
    differ (else the divergence's own rank, else r0); and the ranks targeted by faults that differ
    between the branches."""
    from timetravel.torch.world.module_probe import rank_number, steps_completed

    with track_on(session, a) as track_a, track_on(session, b) as track_b:
        _at_divergence(track_a, divergence.event_a, divergence.t_ns)
        _at_divergence(track_b, divergence.event_b, divergence.t_ns)
        world_a, world_b = track_a.world, track_b.world
        last_a = world_a.nodes["c10d"].get("last", {})
        last_b = world_b.nodes["c10d"].get("last", {})
        ranks = int(world_a.nodes["c10d"]["ranks"])
        differing = [
            rank
            for rank in range(ranks)
            if _digests(last_a.get(str(rank))) != _digests(last_b.get(str(rank)))
        ]
        rank = differing[0] if differing else (rank_number(divergence.node) or 0)
        step = steps_completed(world_a, rank) + 1
        faulted = _fault_targets(track_a.world.faults, track_b.world.faults)
    return step, faulted


def _at_divergence(track: Session, event: int | None, t_ns: int) -> None:
    if event is not None:
        track.goto_event(event)
    else:
        track.goto_time(t_ns)


def _digests(record: Any) -> tuple[Any, ...]:
    if not isinstance(record, dict):
        return ()
    return (record.get("key"), tuple(record.get("in_digest", [])), tuple(record.get("out_digest", [])))


def _fault_targets(faults_a: list[dict[str, Any]], faults_b: list[dict[str, Any]]) -> set[int]:
    """The ranks targeted by fault records one branch has and the other has not (or has otherwise)."""
    from timetravel.torch.world.module_probe import rank_number

    described_a = {repr(sorted(record.items())) for record in faults_a}
    described_b = {repr(sorted(record.items())) for record in faults_b}
    targets = set()
    for record in [*faults_a, *faults_b]:
        if (repr(sorted(record.items())) in described_a) != (repr(sorted(record.items())) in described_b):
            number = rank_number(record.get("target"))
            if number is not None:
                targets.add(number)
    return targets


# -- 2. trace -------------------------------------------------------------------------------------


def ops_starts(track: Session, step: int) -> list[int]:
    """The snapshots a trace of ``step`` may start from, latest first: every rank waits, exited or has
    not started, having completed at most ``step - 2`` optimizer steps; on a branch, from its fork on."""
    from timetravel.torch.world.module_probe import steps_completed

    found = []
    for position, world in resumable_worlds(track):
        ranks = int(world.nodes["c10d"]["ranks"])
        states = [world.nodes[f"r{rank}"].get("status") for rank in range(ranks)]
        if all(status in ("new", "waiting", "exited") for status in states) and all(
            steps_completed(world, rank) <= step - 2 for rank in range(ranks)
        ):
            found.append(position)
    return found


class _NoWholeStep(Exception):
    """No snapshot of a branch lets the trace see the whole step (it forks inside it, or a process
    that far may be in it already): both branches are traced from one event instead."""


def _trace(
    session: Session, name: str, step: int, capture: dict[int, list[list[Any]]] | None, at: int | None
) -> dict[str, Any]:
    """Re-execute branch ``name`` with every rank's ops of ``step`` hashed (and ``capture``'s values
    sent): from a start that sees the whole step (``at`` None), else from event #``at`` on, where
    each rank stands. The probe and the event it started from."""
    with track_on(session, name) as track, track.source.with_values():  # type: ignore[attr-defined]
        # the trace lives in the rank processes: they run, not the journal (torch/world/journal.py)
        if at is not None:
            stepper = stepper_at(track, at)
            return {"probe": _traced(track, stepper, step, capture, now=True), "start": at}
        candidates: list[int | None] = [*ops_starts(track, step)]
        if not track.fork_events:
            candidates.append(None)  # from #0: fresh processes, traced from their start
        for start in candidates:
            stepper = Stepper(track, start or 0)
            probe = _traced(track, stepper, step, capture, now=False, resumed=start is not None)
            if not probe.refused:
                return {"probe": probe, "start": stepper.start_events}
        raise _NoWholeStep()


def _traced(
    track: Session,
    stepper: Stepper,
    step: int,
    capture: dict[int, list[list[Any]]] | None,
    *,
    now: bool,
    resumed: bool = True,
) -> Any:
    """Run ``stepper`` to its horizon (or until every rank finished ``step``) with the op trace on."""
    source: Any = track.source  # the torch world source (torch/world/world_source.py)
    ranks = int(stepper.world.nodes["c10d"]["ranks"])
    world = stepper.world if resumed else None
    with source.tracing_ops(step, ranks, world, capture, now=now) as probe:
        try:
            while stepper.events < stepper.horizon and not probe.refused:
                if len(probe.done) == ranks or stepper.advance(ADVANCE_EVENTS) == 0:
                    break
        finally:
            source.end_probe(stepper.world)  # the traced processes end here: no seek resumes them
    return probe


# -- 3. match ---------------------------------------------------------------------------------------

Key = tuple[str, str, int]
Found = tuple[int, str, str, int, list[Any] | None, list[Any] | None]
"""A differing op: rank, module, op, occurrence, its record on side a and on side b (None: not run)."""


def differing_ops(
    ops_a: dict[int, list[list[Any]]], ops_b: dict[int, list[list[Any]]], faulted: set[int]
) -> tuple[list[Found], int]:
    """The ops whose outputs differ (by shapes, dtypes or digest) or that ran on one side only, in
    execution order (see the module docstring), as (rank, module, op, occurrence, record a, record
    b); and how many ops were matched. A record: [index, t_ns, module, op, occurrence, shapes, dtypes,
    digest]."""
    found: list[Found] = []
    compared = 0
    for rank in sorted(set(ops_a) | set(ops_b)):
        by_key_b = {(record[2], record[3], record[4]): record for record in ops_b.get(rank, [])}
        seen: set[Key] = set()
        for record in ops_a.get(rank, []):
            key = (record[2], record[3], record[4])
            seen.add(key)
            other = by_key_b.get(key)
            if other is not None:
                compared += 1
            if other is None or record[5:8] != other[5:8]:
                found.append((rank, *key, record, other))
        found += [(rank, *key, None, record) for key, record in by_key_b.items() if key not in seen]

    def order(
        item: tuple[int, str, str, int, list[Any] | None, list[Any] | None],
    ) -> tuple[int, int, int, int]:
        rank, _module, _op, _occurrence, record_a, record_b = item
        record = record_a if record_a is not None else record_b
        assert record is not None
        return (int(record[1]), 0 if rank in faulted else 1, rank, int(record[0]))

    found.sort(key=order)
    return found, compared


# -- 4. values --------------------------------------------------------------------------------------


def _difference(
    step: int,
    item: Found,
    values_a: dict[int, dict[Key, list[np.ndarray]]],
    values_b: dict[int, dict[Key, list[np.ndarray]]],
    *,
    compare: bool,
) -> OpDifference:
    rank, module, op, occurrence, record_a, record_b = item
    record = record_a if record_a is not None else record_b
    assert record is not None
    difference = OpDifference(
        rank=f"r{rank}",
        step=step,
        module=module,
        op=op,
        occurrence=occurrence,
        shapes=tuple(tuple(int(size) for size in shape) for shape in record[5]),
        dtypes=tuple(str(dtype) for dtype in record[6]),
        t_ns=int(record[1]),
        index_a=int(record_a[0]) if record_a is not None else None,
        index_b=int(record_b[0]) if record_b is not None else None,
    )
    if record_a is None or record_b is None:
        side = "b" if record_a is None else "a"
        return _replace(difference, note=f"ran on {side} only")
    if record_a[5:7] != record_b[5:7]:
        return _replace(
            difference, note=f"outputs {record_a[6]}{record_a[5]} on a, {record_b[6]}{record_b[5]} on b"
        )
    if not compare:
        return difference
    key = (module, op, occurrence)
    arrays_a, arrays_b = values_a.get(rank, {}).get(key), values_b.get(rank, {}).get(key)
    if arrays_a is None or arrays_b is None:
        return _replace(difference, note="values not captured (over the capture budget)")
    return _replace(difference, **_figures(arrays_a, arrays_b))


def _figures(arrays_a: list[np.ndarray], arrays_b: list[np.ndarray]) -> dict[str, Any]:
    """Max abs difference and max ULP distance over every output pair, elements that differ."""
    max_abs: float | None = None
    max_ulp: int | None = None
    differing = elements = 0
    for array_a, array_b in zip(arrays_a, arrays_b, strict=False):
        if array_a.shape != array_b.shape or array_a.dtype != array_b.dtype:
            continue
        summary = summarize_arrays(np.asarray(array_a), np.asarray(array_b))
        differing += summary.differing
        elements += int(array_a.size)
        if summary.max_abs is not None:
            max_abs = max(float(abs(summary.max_abs)), max_abs or 0.0)
        if summary.max_ulp is not None:
            max_ulp = max(summary.max_ulp, max_ulp or 0)
    return {"max_abs_diff": max_abs, "max_ulp": max_ulp, "differing": differing, "elements": elements}


def _replace(difference: OpDifference, **changes: Any) -> OpDifference:
    from dataclasses import replace

    return replace(difference, **changes)


__all__ = ["OpDifference", "OpsDiff", "differing_ops", "first_differing_ops", "ops_starts"]
