"""How ``explain`` ends on a torch run: the rank, the step, its batch's sampler indices, the module.

The causal chain of :mod:`.explain` follows events; on a torch recording it reaches the collective a
NaN entered, which is where the World sees it but not where the user's code made it. This module
adds the :class:`~timetravel.explore.explain_results.FailureSite`:

* from the stored recording, with no execution (timetravel/torch/world/module_probe.py): the failing
  rank, the optimizer step in progress there and the sampler indices its DataLoader yielded for
  that step's batches (``nodes/rN/batch``);
* by the **module probe**: the run is re-executed through the Session's world source from the
  latest snapshot before that step (:func:`probe_start`: its ranks resumed from a live checkpoint,
  or rebuilt as a seek rebuilds them), the failing rank's process asked to install a probe of that
  step before it runs on (read-only forward hooks and output-gradient hooks on every module:
  torch/rank_probe.py), up to the failure; from #0, with the probe in the rank's start settings,
  when no snapshot will do (or the rank refused: it may be in the step already). Every re-executed
  event is checked against the recorded hash chain by the
  :class:`~timetravel.explore.stepper.Stepper` (the probe changes no bit of the World: its answer
  comes back on a side channel), and no rank checkpoint of a probed process is kept for later seeks.
  On a branch only snapshots from its fork on will do: before it, its parent's history runs.

Executing the script needs the user's ``--script PATH``: without it (or without torch) the site
says so in one line and keeps what the recording knows.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from timetravel.explore.explain_results import PROBE_FINITE, PROBE_FOUND, PROBE_NOT_RUN, FailureSite
from timetravel.explore.provenance import EventTrace
from timetravel.explore.session import Session
from timetravel.explore.stepper import Stepper, event_number_at_time, recorded_events
from timetravel.explore.work import ProgressCallback, WorkProgress

TORCH_SCENARIO = "torch"
PROBED_KINDS = frozenset({"nan"})
"""Failures the module probe looks for: a NaN or Inf a rank fed into a collective (``detect_nan``)."""


def is_torch(session: Session) -> bool:
    return session.scenario.name == TORCH_SCENARIO


def execution_refusal(session: Session) -> str | None:
    """Why this torch recording's script may not run here (one line), None when it may."""
    from timetravel.torch.world import module_probe

    return module_probe.execution_refusal(dict(session.header["config"]), session.launch)


@dataclass(frozen=True)
class FaultCause:
    """A fault's hit that explains a torch failure: the event it acted in, and the chain's words."""

    trace: EventTrace
    fault_id: str
    what: str
    """``fault f1 (corrupt) acted on r1 in all_reduce 0#10 (group 0, seq 10): result: ...``."""
    because: str
    """Why it explains the failure (``hit r1, the replica that drifted``)."""
    detail: dict[str, Any] = field(default_factory=dict)
    """The JSON's ``fault`` of the link: id, kind, target, t_ns, op, collective, group, seq, hit."""


def fault_causes(
    session: Session, failure: dict[str, Any], trace: Callable[[int], EventTrace] | None
) -> tuple[list[FaultCause], str]:
    """The faults whose hits explain ``failure`` (first hit first), each at the event it acted in
    (re-executed by ``trace``, which holds the explanation's budget; None when the script may not
    run: the event is then read from the recording, :func:`_recorded_hit`); and when none does, the
    one line that says so and whose the failure is (torch/fault_causes.py decides)."""
    from timetravel.torch.world import fault_causes as causes

    world = _end_world(session)
    full = causes.full_failure(world, failure)
    acted = causes.acted(world, full)
    found = []
    for fault in acted:
        hit = _hit_trace(session, fault, trace) if trace is not None else _recorded_hit(session, fault, world)
        if hit is None:
            continue
        collective = causes.collective_of(hit.event)
        because = causes.explains(fault, collective, full)
        if not because:
            continue
        detail = {
            "id": fault["id"],
            "kind": fault["kind"],
            "target": fault["target"],
            "t_ns": hit.event.t,
            **(collective or {"op": None, "collective": None, "group": None, "seq": None}),
            "hit": fault["line"],
        }
        found.append(FaultCause(hit, fault["id"], causes.hit_text(fault, collective), because, detail))
    return found, "" if found else causes.no_fault_text(world, full, acted)


SAME_TIME_EVENTS_MAX = 64
"""Events at one logical time looked through for a fault's hit (a collective's entries and waits)."""


def _hit_trace(
    session: Session, fault: dict[str, Any], trace: Callable[[int], EventTrace]
) -> EventTrace | None:
    """The event the fault first acted in: among the events at its log line's time and node (or,
    when the bounded log dropped the line, in the snapshot interval where its hits first rose),
    the first whose re-execution raised its hit count."""
    for number in _hit_candidates(session, fault):
        traced = trace(number)
        if fault["id"] in traced.faults_hit:
            return traced
    return None


def _recorded_hit(session: Session, fault: dict[str, Any], world: Any) -> EventTrace | None:
    """The event a fault first acted in, read from the recording alone (no ``--script``): among the
    events at its first hit's log line time and node, the first call of the collective operation the
    line names (``fault f1 (corrupt) on r1: all_reduce result: ...``). None when the bounded log
    dropped that line: only re-executing the interval where its hits rose could tell the event.

    The trace carries what the recording holds (the event, the fault schedule) and nothing a
    re-execution would have seen (reads, changes): the chain's fault link needs no more."""
    from timetravel.torch.world import fault_causes as causes

    if fault["t_ns"] is None:
        return None
    prefix = f"fault {fault['id']} ({fault['kind']}) on {fault['target']}: "
    line = str(fault.get("line") or "")
    operation = line[len(prefix) :].split(" ", 1)[0] if line.startswith(prefix) else ""
    chosen: tuple[int, Any] | None = None
    for number, event in _same_time_events(session, fault):
        collective = causes.collective_of(event)
        if chosen is None or (collective is not None and collective["op"] == operation):
            chosen = (number, event)
            if collective is not None and collective["op"] == operation:
                break
    if chosen is None:
        return None
    number, event = chosen
    return EventTrace(
        number=number,
        event=event,
        reads=(),
        before={},
        after={},
        changes=(),
        faults_hit=(str(fault["id"]),),
        log=(),
        scheduled=(),
        failed=False,
        roles={},
        faults=tuple(world.faults),
    )


def _same_time_events(session: Session, fault: dict[str, Any]) -> list[tuple[int, Any]]:
    """The recorded events (number, event) at the time and on the node of the fault's first hit."""
    first = event_number_at_time(session, fault["t_ns"] - 1) + 1
    found = []
    for number, event in recorded_events(
        session, first, min(first + SAME_TIME_EVENTS_MAX, session.end.events)
    ):
        if event.t != fault["t_ns"]:
            break
        if event.dst == fault["node"]:
            found.append((number, event))
    return found


def _hit_candidates(session: Session, fault: dict[str, Any]) -> list[int]:
    if fault["t_ns"] is not None:
        return [number for number, _event in _same_time_events(session, fault)]
    snapshots = session.snapshots()
    before = 0
    for position in range(len(snapshots)):
        hits = session.snapshot_world(position).fabric.get("fault_hits", {})
        if hits.get(fault["id"]):
            nodes = ("c10d", str(fault["target"]))
            window = recorded_events(session, before + 1, snapshots[position].events)
            return [number for number, event in window if event.dst in nodes]
        before = snapshots[position].events
    return []


def nan_entry_event(session: Session, failure: dict[str, Any]) -> int | None:
    """The recorded event at which a ``nan`` failure's node entered the collective the failure names
    (the detector fires once every member entered: its own event is the last member's call, which may
    be another rank's). None when the failure names no collective or the entry is not found."""
    from timetravel.torch.world import fault_causes as causes
    from timetravel.torch.world.module_probe import rank_number

    world = _end_world(session)
    full = causes.full_failure(world, failure)
    rank = rank_number(full.get("node"))
    record = world.nodes.get("c10d", {}).get("last", {}).get(str(rank))
    if rank is None or not isinstance(record, dict) or record.get("key") != full.get("collective"):
        return None
    first = event_number_at_time(session, int(record["t_ns"]) - 1) + 1
    for number, event in recorded_events(
        session, first, min(first + SAME_TIME_EVENTS_MAX, session.end.events)
    ):
        if event.t != record["t_ns"]:
            break
        payload = event.payload if isinstance(event.payload, dict) else {}
        if event.kind == "call" and payload.get("rank") == rank and payload.get("id") == record.get("id"):
            return number
    return None


def _end_world(session: Session) -> Any:
    return session.snapshot_world(len(session.snapshots()) - 1)


def failure_site(
    session: Session, failure: dict[str, Any], progress: ProgressCallback | None = None
) -> FailureSite | None:
    """The site of ``failure`` on this torch branch (None when it names no rank); the module
    probe runs when the script may execute here."""
    from timetravel.torch.world import fault_causes, module_probe

    world = _end_world(session)
    stored = module_probe.failure_site(world, fault_causes.full_failure(world, failure))
    if stored is None:
        return None
    indices = stored["indices"]
    site = FailureSite(
        rank=stored["rank"],
        step=int(stored["step"]),
        indices=tuple(indices) if indices is not None else None,
        indices_note=str(stored["indices_note"]),
        batches=int(stored.get("batches", 0)),
        probe=PROBE_NOT_RUN,
    )
    refusal = execution_refusal(session)
    if failure.get("kind") not in PROBED_KINDS:
        note = f"none looked for (a {failure.get('kind')} failure is not a non-finite value)"
        if refusal is not None:
            note += f"; the causal chain re-executes the run: {refusal}"
        return _with_probe(site, PROBE_NOT_RUN, note)
    if refusal is not None:
        note = f"not probed (the probe re-executes step {site.step} with module hooks): {refusal}"
        return _with_probe(site, PROBE_NOT_RUN, note)
    return _probe(session, site, progress)


def _with_probe(
    site: FailureSite,
    probe: str,
    note: str,
    module: dict[str, Any] | None = None,
    probe_from: int | None = None,
    uninitialised: dict[str, Any] | None = None,
) -> FailureSite:
    return FailureSite(
        site.rank,
        site.step,
        site.indices,
        site.indices_note,
        site.batches,
        probe,
        note,
        module,
        probe_from,
        uninitialised,
    )


def _probe(session: Session, site: FailureSite, progress: ProgressCallback | None) -> FailureSite:
    from timetravel.torch.world import module_probe

    rank = module_probe.rank_number(site.rank)
    assert rank is not None, site.rank
    start = probe_start(session, rank, site.step)
    answer: dict[str, Any] | None = None
    memory: dict[str, Any] | None = None
    start_events = 0
    if start is not None:
        answer, memory = _probe_run(session, rank, site, start, progress)
        start_events = session.snapshots()[start].events
    if (answer is None or answer.get("refused")) and not session.fork_events:
        answer, memory = _probe_run(session, rank, site, None, progress)  # from #0: a fresh process
        start_events = 0
    if answer is None and memory is not None:  # the watch answered: the rank ran, no module returned
        note = (
            f"none returned: {site.rank} fed the non-finite values into a collective before any module "
            f"of step {site.step} returned an output (what the parameters held before the forward: below)"
        )
        return _with_probe(site, PROBE_NOT_RUN, note, probe_from=start_events, uninitialised=memory)
    if answer is None or answer.get("refused"):
        why = (answer or {}).get("refused") or "the probed rank never answered"
        if session.fork_events:
            fork = f"this branch forks at #{session.fork_events}"
            note = f"not probed: no snapshot of this branch before step {site.step} could start it ({fork}; {why})"
        else:
            note = f"not probed: the re-execution of {site.rank} from #0 gave no answer ({why})"
        return _with_probe(site, PROBE_NOT_RUN, note, uninitialised=memory)
    if answer["finding"] is None:
        note = (
            f"every module output and gradient of {site.rank}'s step {site.step} was finite up to the "
            "failure: the non-finite value was made outside any module (a loss scaled by inf, an op in "
            "the training loop)"
        )
        return _with_probe(site, PROBE_FINITE, note, probe_from=start_events, uninitialised=memory)
    return _with_probe(site, PROBE_FOUND, "", dict(answer["finding"]), start_events, memory)


def probe_start(session: Session, rank: int, step: int) -> int | None:
    """The snapshot the module probe re-executes from: the latest one (after a branch's fork, on a
    branch) where ``rank`` waits in a collective and has completed at most ``step - 2`` optimizer
    steps — its process, which may have run one result ahead of the World, cannot be in ``step``
    yet, so hooks installed there see all of it. None: no such snapshot (the probe starts at #0)."""
    from timetravel.torch.world import module_probe

    for position, world in resumable_worlds(session):
        state = world.nodes.get(f"r{rank}", {})
        if state.get("status") == "waiting" and module_probe.steps_completed(world, rank) <= step - 2:
            return position
    return None


def resumable_worlds(session: Session) -> Iterator[tuple[int, Any]]:
    """(position, world) of the session's snapshots a re-execution may start from, latest first: not
    the run's end, not before a branch's fork (before it, its parent's history runs)."""
    snapshots = session.snapshots()
    for position in range(len(snapshots) - 1, 0, -1):
        snapshot = snapshots[position]
        if not snapshot.final and snapshot.events >= session.fork_events:
            yield position, session.snapshot_world(position)


def _probe_run(
    session: Session, rank: int, site: FailureSite, start: int | None, progress: ProgressCallback | None
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """Re-execute from snapshot ``start`` (None: #0) to the end with the probe on ``rank``: its answer,
    and from #0 what the watch of uninitialised memory found (torch/rank/init_watch.py; None when it
    did not run or sent nothing)."""
    source: Any = session.source  # the torch world source (torch/world/world_source.py)
    with source.with_values():  # the probe lives in the rank processes: they run, not the journal
        return _probed(session, source, rank, site, start, progress)


def _probed(
    session: Session,
    source: Any,
    rank: int,
    site: FailureSite,
    start: int | None,
    progress: ProgressCallback | None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    stepper = Stepper(session, start or 0)
    if progress is not None:
        where = f"#{stepper.events}" if start is not None else "#0"
        progress(
            WorkProgress(
                "explain", 0, 1, f"module probe: re-executing {site.rank} from {where} to step {site.step}"
            )
        )
    world = stepper.world if start is not None else None
    with source.probing(rank, site.step, world, init=start is None) as probe:
        try:
            stepper.advance_observed(stepper.horizon - stepper.events, _ignore)
        finally:
            source.end_probe(stepper.world)  # the probed processes end here: no seek resumes them
        memory = None
        if rank in probe.init_reports:
            memory = {"report": probe.init_reports[rank], "collective": probe.collectives.get(rank)}
        return probe.findings.get(rank), memory


def _ignore(_event: Any) -> None:
    """The probe's run pauses after every event (so no checkpoint of a probed rank is kept)."""


__all__ = [
    "FaultCause",
    "execution_refusal",
    "failure_site",
    "fault_causes",
    "is_torch",
    "nan_entry_event",
    "resumable_worlds",
]
