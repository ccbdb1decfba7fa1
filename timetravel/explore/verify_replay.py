"""``Session.replay``: re-execute a whole recording and check every stored byte that can be checked.

"Verified" means each of these held (each a :class:`Mismatch` when it does not, exit code 1):

1. every frame's checksums, sizes and schema (the reader);
2. the structure: the EVENTS frames of the replayed branch (and its parents) follow one another in
   file order with no gap, duplicate or reordering (recording/structure.py);
3. the stored chain: the stored event bytes of every batch hash, batch after batch, to the stored
   chain digests;
4. the re-execution: the scenario builds the recorded initial world, every chain batch it flushes
   has the recorded digest (so the stored events are the events the code produces), the state at
   every snapshot has the recorded hash, and the last (partial) batch matches the stored one whole;
5. the end: the END frame's events, end time, state hash, hash chain, stop reason, outcome and
   failure are the replay's, and the FAILURE frames of the branch are the failure the replay
   raised (or there are none when it raised none).

What it cannot check it names in ``not_verified`` (NOTE frames, the choice log, other branches,
what a truncated file lost).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from timetravel.explore.replay import ChainVerifier, Mismatch
from timetravel.recording.catalog import MAIN_BRANCH, EventBatchInfo, ManifestInfo
from timetravel.recording.format import FrameType
from timetravel.recording.structure import order_problems, stored_chain_problem
from timetravel.sim.encoding import digest, pack
from timetravel.sim.kernel import RunResult, Simulation, chain_head, chain_step
from timetravel.sim.runner import build_world, public_failure
from timetravel.sim.world import World

if TYPE_CHECKING:
    from timetravel.explore.session import Session

CAUSE_RECORDING = "recording"
"""The recording contradicts itself (forged or damaged with valid checksums); no code involved."""


@dataclass
class ReplayReport:
    """What ``timetravel replay --json`` prints."""

    recording: str
    scenario: str
    seed: int
    events: int
    events_recorded: int
    verified: bool
    first_mismatch: dict[str, Any] | None
    cause: str | None
    batches_checked: int
    snapshots_checked: int
    outcome: str
    recorded_outcome: str | None
    complete: bool
    loss: list[str]
    wall_s: float = 0.0
    not_verified: list[str] = field(default_factory=list)
    """What the replay could not check (so "verified" claims nothing about it)."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def recording_mismatch(session: Session, batch: EventBatchInfo, detail: str) -> Mismatch:
    where = session.reader.where(batch.offset)
    return Mismatch(
        what="recording",
        event=batch.first + 1,
        t_ns=None,
        node=None,
        kind=None,
        detail=f"{where}: {detail}",
        cause=CAUSE_RECORDING,
    )


def structure_mismatch(session: Session) -> Mismatch | None:
    """A gap, duplicate or reordering among the batches this branch replays, or a broken stored chain."""
    reader = session.reader
    branches = [session.branch, *_ancestors(session)]
    for branch in branches:
        problems = order_problems(reader.event_batches(branch), starts_at_zero=branch == MAIN_BRANCH)
        if problems:
            batch, sentence = problems[0]
            return recording_mismatch(session, batch, sentence)
    problems = order_problems(session.event_batches, starts_at_zero=True)
    if problems:
        batch, sentence = problems[0]
        return recording_mismatch(session, batch, sentence)
    broken = stored_chain_problem(reader, session.event_batches)
    if broken is not None:
        return recording_mismatch(session, broken[0], broken[1])
    return None


def _ancestors(session: Session) -> list[str]:
    names: list[str] = []
    branch = session.branch
    branches = session.reader.catalog.branches
    while branch != MAIN_BRANCH and branch in branches and len(names) < 64:
        parent = branches[branch].get("parent", MAIN_BRANCH)
        if not isinstance(parent, str):
            break
        names.append(parent)
        branch = parent
    return names


def replay_session(session: Session, progress: Callable[[int, int], None] | None = None) -> ReplayReport:
    """See the module docstring. A damaged frame raises RecordingError; a difference is reported."""
    started = time.perf_counter()
    reader = session.reader
    reader.verify_frames()
    cause = session.cause_if_mismatch
    header = session.header
    manifests: list[ManifestInfo] = session.snapshots_info
    end_info = session.end
    mismatch = structure_mismatch(session)
    world = _start_world(session, manifests)
    if mismatch is None:
        mismatch = _initial_mismatch(session, world, manifests[0], cause)
    verifier = ChainVerifier(reader, session.event_batches, cause)
    simulation = session.simulation(
        world,
        overrides=session.overrides_at(world.events_processed),
        chain_batch_events=int(header.get("chain_batch_events", 4096)),
        determinism=session.determinism,
        on_chain_batch=verifier.on_chain_batch,
    )
    snapshots_checked = 0
    for info in manifests[1:]:
        if mismatch is not None or verifier.mismatch is not None:
            break
        if info.final or info.events <= world.events_processed:
            continue
        simulation.run(max_events=info.events - world.events_processed)
        verifier.check_open_batch(world.chain_events, world.chain_batch)
        if verifier.mismatch is None and world.events_processed == info.events:
            snapshots_checked += 1
            if world.state_hash() != info.state_hash:
                mismatch = state_mismatch(session, info, world, cause)
        if progress is not None:
            progress(world.events_processed, end_info.events)
    end = reader.end(session.branch)
    result: RunResult | None = None
    if mismatch is None and verifier.mismatch is None:
        result = run_to_end(session, simulation, end)
        mismatch = final_batch_mismatch(session, world, cause)
        verifier.check_open_batch(world.chain_events, world.chain_batch)
    mismatch = mismatch or verifier.mismatch
    final = manifests[-1] if manifests[-1].final else None
    if mismatch is None and (end is not None or final is not None):
        snapshots_checked += 1
        mismatch = end_mismatch(session, world, result, end, final, cause)
    if mismatch is None:
        mismatch = failure_frames_mismatch(session, world)
    if progress is not None:
        progress(world.events_processed, end_info.events)
    return ReplayReport(
        recording=str(reader.path),
        scenario=session.scenario.name,
        seed=int(header["seed"]),
        events=world.events_processed,
        events_recorded=end_info.events,
        verified=mismatch is None,
        first_mismatch=mismatch.to_json() if mismatch is not None else None,
        cause=mismatch.cause if mismatch is not None else None,
        batches_checked=verifier.batches_checked,
        snapshots_checked=snapshots_checked,
        outcome="fail" if world.failures else "pass",
        recorded_outcome=end["outcome"] if end else None,
        complete=session.info.complete,
        loss=session.info.loss,
        wall_s=round(time.perf_counter() - started, 3),
        not_verified=not_verified(session, end),
    )


def _start_world(session: Session, manifests: list[ManifestInfo]) -> World:
    """Where a replay starts: a branch's first snapshot at or after its fork (its history before
    the fork is its parent's), else the world the scenario builds from the recorded config and seed."""
    if session.fork_events:
        start = next(info for info in manifests if info.events >= session.fork_events)
        return session.restore_world(start, full_check=True)
    header = session.header
    world = build_world(session.scenario, dict(header["config"]), int(header["seed"]), session.launch)
    world.branch_key = int(header.get("branch_key", 0))
    return world


def _initial_mismatch(session: Session, world: World, first: ManifestInfo, cause: str) -> Mismatch | None:
    """A main run whose scenario now builds another initial world than the one recorded at #0."""
    if session.fork_events or first.events != 0 or world.state_hash() == first.state_hash:
        return None
    return Mismatch("initial_state", 0, 0, None, None, "the scenario builds another initial world", cause)


def run_to_end(session: Session, simulation: Simulation, end: dict[str, Any] | None) -> RunResult | None:
    """Run on the way the recorded run stopped (so end-of-run checks run when they did)."""
    world = simulation.world
    remaining = session.end.events - world.events_processed
    stop = end.get("stop") if end is not None else None
    if stop == "until":
        return simulation.run(until_ns=session.end.t_ns, max_events=remaining + 1)
    if stop in ("drained", "failure"):
        return simulation.run(max_events=remaining + 1)
    if remaining > 0:
        return simulation.run(max_events=remaining)
    return None


def final_batch_mismatch(session: Session, world: World, cause: str) -> Mismatch | None:
    """The batch still open at the end must be the stored partial batch whole, not a prefix of it."""
    if not world.chain_batch:
        return None
    recorded = next((b for b in session.event_batches if b.first == world.chain_events), None)
    if recorded is None:
        return None
    if recorded.digest == chain_step(world.chain_digest, world.chain_batch) and recorded.count == len(
        world.chain_batch
    ):
        return None
    stored = session.reader.events_bytes(recorded)
    if pack(world.chain_batch) == stored:
        return None
    return Mismatch(
        what="event",
        event=recorded.first + min(recorded.count, len(world.chain_batch)) + 1,
        t_ns=None,
        node=None,
        kind=None,
        detail=(
            f"the last batch after event #{recorded.first} replays as {len(world.chain_batch)} events, "
            f"{session.reader.where(recorded.offset)} holds {recorded.count}"
        ),
        cause=cause,
    )


def state_mismatch(session: Session, info: ManifestInfo, world: World, cause: str) -> Mismatch:
    """The events matched but the state at a snapshot did not: name the parts and nodes."""
    manifest = session.reader.manifest(info)
    recorded_nodes = {str(name): node_digest for name, node_digest in manifest["nodes"]}
    differing = [name for name, state in world.nodes.items() if recorded_nodes.get(name) != digest(state)]
    replayed_parts = dict(world.part_digests())
    parts = [
        name for name, part_digest in manifest["parts"].items() if replayed_parts.get(name) != part_digest
    ]
    what = ", ".join([*(f"node {name}" for name in differing[:5]), *(f"part {name}" for name in parts)])
    return Mismatch(
        what="state",
        event=info.events,
        t_ns=info.t_ns,
        node=differing[0] if differing else None,
        kind=None,
        detail=(
            f"the events match, but the state after event #{info.events} (snapshot {info.index}) differs in "
            f"{what or 'the pending events or metrics'}; a handler may read state the kernel does not "
            "control, or write outside its own node"
        ),
        cause=cause,
    )


def end_mismatch(
    session: Session,
    world: World,
    result: RunResult | None,
    end: dict[str, Any] | None,
    final: ManifestInfo | None,
    cause: str,
) -> Mismatch | None:
    """The END frame (or the final snapshot) against the replayed end, field by field."""
    expected_events = end["events"] if end is not None else final.events if final is not None else 0
    expected_hash = end["state_hash"] if end is not None else final.state_hash if final is not None else ""
    if world.events_processed != expected_events or world.state_hash() != expected_hash:
        return _outcome_mismatch(
            world,
            f"the replay ends after {world.events_processed} events in state {world.state_hash()}, "
            f"the recording after {expected_events} in {expected_hash}",
            cause,
        )
    if end is None:
        return None
    outcome = "fail" if world.failures else "pass"
    replayed: dict[str, Any] = {
        "outcome": outcome,
        "t_end_ns": world.t_ns,
        "hash_chain": chain_head(world),
        "failure": public_failure(world.failures[0]) if world.failures else None,
    }
    if result is not None:
        replayed["stop"] = result.stop
    payload = session.reader.frame_payload(end["offset"], FrameType.END)
    for key, value in replayed.items():
        if key in payload and payload[key] != value:
            return _outcome_mismatch(
                world,
                f"{session.reader.where(end['offset'])}: the END frame's {key} is {_short(payload[key])}, "
                f"the replay's {_short(value)}",
                CAUSE_RECORDING,
            )
    return None


def _outcome_mismatch(world: World, detail: str, cause: str) -> Mismatch:
    """A mismatch of the run's end as a whole: at the replay's last event, on no node."""
    return Mismatch(
        what="outcome",
        event=world.events_processed,
        t_ns=world.t_ns,
        node=None,
        kind=None,
        detail=detail,
        cause=cause,
    )


def failure_frames_mismatch(session: Session, world: World) -> Mismatch | None:
    """The branch's FAILURE frames against the failure the replay raised (the recorder writes the
    first failure, once, with the event count at the end)."""
    if session.end.events != world.events_processed:
        return None
    expected = public_failure(world.failures[0]) if world.failures else None
    records = session.failures()
    for position, record in enumerate(records):
        payload = session.reader.frame_payload(record["offset"], FrameType.FAILURE)
        where = session.reader.where(record["offset"])
        if expected is None or position > 0:
            detail = f"{where}: a FAILURE frame says {_short(payload['failure'])}; the replay raised " + (
                "no failure" if expected is None else "only one"
            )
        elif payload["failure"] != expected:
            detail = f"{where}: the FAILURE frame says {_short(payload['failure'])}, the replay raised {_short(expected)}"
        else:
            continue
        return Mismatch("outcome", world.events_processed, world.t_ns, None, None, detail, CAUSE_RECORDING)
    if expected is not None and not records and session.reader.end(session.branch) is not None:
        detail = f"the replay raised {_short(expected)}, and the recording has no FAILURE frame for it"
        return Mismatch("outcome", world.events_processed, world.t_ns, None, None, detail, CAUSE_RECORDING)
    return None


def not_verified(session: Session, end: dict[str, Any] | None) -> list[str]:
    """What a replay of this branch leaves unchecked, in words."""
    reader = session.reader
    catalog = reader.catalog
    lines = []
    notes = len(catalog.notes) + catalog.notes_dropped
    if notes:
        lines.append(f"{notes} NOTE frame{'s' if notes != 1 else ''} (the recorder's remarks)")
    if catalog.choices.get(session.branch):
        lines.append("the choice log (CHOICES frames; a replay draws the choices again)")
    if session.branch != MAIN_BRANCH:
        lines.append(
            f"the main run (this replay starts from the branch's snapshot at its fork, event #{session.fork_events})"
        )
    others = [name for name in catalog.branches if name != session.branch]
    if others:
        lines.append(f"other branches: {', '.join(others[:5])}{' ...' if len(others) > 5 else ''}")
    if end is None:
        lines.append("the run's end (no END frame: the file is truncated or was never closed)")
    return lines


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
