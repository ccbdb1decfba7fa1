"""Minimize a branch's failure: its future from the fork, with fewer faults and canonical choices.

A branch's inputs are not a config a fresh build can start from: its world was changed mid-run
(a new branch key, faults dropped, added or edited, a branchable setting). So the branch's own
snapshot at the fork — the world right after those changes — is where every candidate starts,
restored afresh for each run. From there the minimizer's passes that make sense apply:

* ``faults``: ddmin over the faults still **pending** at the fork (their start event is queued).
  A fault that already started has done part of its work into the state; it stays. Removing a
  pending fault takes its record out of the schedule and, for a scenario without the fabric,
  its queued ``fault`` events (the fabric's own events find no record and do nothing).
* ``choices``: every draw after the fork towards 0, the canonical value.

The world's size and the faults' parameters are fixed by the snapshot, so those passes are left
out. The repro is the recording itself with one more branch, ``<branch>-min`` (``-min2``, ... if
taken): the same prefix, and the minimized future recorded from the fork with every choice it
forced stored in its BRANCH frame, so it replays bit for bit like any branch. The snapshot pass
then picks the latest of that branch's snapshots from which the failure reproduces.
"""

from __future__ import annotations

import copy
import heapq
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from timetravel.explore.minimize import FAULTS_KEY, Minimizer
from timetravel.explore.minimize_trials import Candidate, MinimizeResult, Trial, run_world
from timetravel.explore.session import Session
from timetravel.explore.stepper import position_at_or_before
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.recording.files import is_same_file, make_parent_folders, partial_path, rename_over
from timetravel.recording.format import FrameType
from timetravel.recording.reader import RecordingReader
from timetravel.recording.recorder import Recorder
from timetravel.recording.replace import check_replaceable
from timetravel.recording.writer import RecordingWriter
from timetravel.sim.world import World

FAULT_KIND = "fault"
FAULT_PHASE_START = "start"
REPRO_SUFFIX = "-min"
REPRO_NAMES_MAX = 1_000


def fault_event_id(payload: Any) -> tuple[str | None, str]:
    """The fault id and phase a queued ``fault`` event carries: the fabric's ``[id, phase]``, or a
    whole record (a scenario's own convention, like needle's), which only starts a fault."""
    if isinstance(payload, dict) and isinstance(payload.get("id"), str):
        return payload["id"], FAULT_PHASE_START
    if isinstance(payload, (list, tuple)) and len(payload) == 2 and isinstance(payload[0], str):
        return payload[0], str(payload[1])
    return None, ""


def pending_fault_ids(world: World) -> list[str]:
    """Ids of the faults whose start is still queued, in schedule order."""
    queued = set()
    for event in world.queue:
        if event.kind == FAULT_KIND:
            fault_id, phase = fault_event_id(event.payload)
            if fault_id is not None and phase == FAULT_PHASE_START:
                queued.add(fault_id)
    return [record["id"] for record in world.faults if record.get("id") in queued]


def remove_pending_faults(world: World, fault_ids: Iterable[str]) -> None:
    """Take pending faults out of a restored world (see the module docstring)."""
    removed = set(fault_ids)
    if not removed:
        return
    if "fault_hits" in world.fabric:
        from timetravel.fabric.faults import remove_fault

        for fault_id in sorted(removed):
            remove_fault(world, fault_id)
        return
    world.faults = [record for record in world.faults if record.get("id") not in removed]
    world.queue = [
        event
        for event in world.queue
        if not (event.kind == FAULT_KIND and fault_event_id(event.payload)[0] in removed)
    ]
    heapq.heapify(world.queue)


class ForkMinimizer(Minimizer):
    """The minimizer with every run starting from the branch's snapshot at its fork."""

    def __init__(self, session: Session, position: int, **options: Any) -> None:
        world = session.snapshot_world(position)
        self.session = session
        self.position = position
        self.pending = pending_fault_ids(world)
        records = [copy.deepcopy(r) for r in world.faults if r.get("id") in self.pending]
        config = {**world.config, FAULTS_KEY: records}
        super().__init__(
            session.scenario,
            config,
            world.seed,
            session.overrides_at(world.events_processed),
            **options,
        )

    def start_world(self, candidate: Candidate) -> tuple[World, list[dict[str, Any]]]:
        """A fresh copy of the fork's world with the candidate's faults, and those faults."""
        world = self.session.snapshot_world(self.position)
        kept = candidate.config.get(FAULTS_KEY) or []
        kept_ids = {record.get("id") for record in kept}
        remove_pending_faults(world, [fault_id for fault_id in self.pending if fault_id not in kept_ids])
        return world, copy.deepcopy([r for r in world.faults if r.get("id") in kept_ids])

    def run_trial(self, candidate: Candidate) -> Trial:
        world, faults = self.start_world(candidate)
        return run_world(
            self.scenario, world, candidate, self.events_max, faults, self.session.simulation, self.past()
        )

    def _takes_explicit_faults(self) -> bool:
        return True

    def _shrink_size(self) -> None:
        """The world's size is the snapshot's."""

    def _shrink_fault_params(self) -> None:
        """A pending fault's events are queued with its times; editing them is left out."""


def minimize_branch(session: Session, **options: Any) -> tuple[MinimizeResult, ForkMinimizer]:
    """Minimize the failure of the session's branch from its fork (see the module docstring);
    ``options``: :class:`Minimizer`'s keyword arguments (``signature``, ``budget``, ``progress``,
    ``should_stop``, ``reserve_runs``)."""
    fork = session.fork_events
    position = position_at_or_before(session, fork)
    if session.snapshots()[position].events != fork:
        raise ValueError(f"branch {session.branch!r} has no snapshot at its fork (#{fork})")
    minimizer = ForkMinimizer(session, position, **options)
    return minimizer.run(), minimizer


def record_branch_repro(
    session: Session,
    minimizer: ForkMinimizer,
    result: MinimizeResult,
    out: str | Path,
    interval: int,
    *,
    force: bool = False,
) -> str:
    """Append the minimized future as a new branch, to the session's recording when ``out`` is it,
    else to a copy of it written as ``out.partial`` and renamed to ``out`` once complete (over a
    file there only when ``force``: recording/replace.py); the branch's name."""
    source = Path(session.reader.path)
    final = Path(out)
    copied = not is_same_file(final, source)
    if copied:
        check_replaceable(final, force=force)
        make_parent_folders(final)
        target = partial_path(final)
        shutil.copyfile(source, target)
    else:
        target = final
    name = _append_minimized(session, minimizer, result, target, interval)
    if copied:
        check_replaceable(final, force=force)  # nobody wrote it meanwhile
        rename_over(target, final)
    return name


def _append_minimized(
    session: Session, minimizer: ForkMinimizer, result: MinimizeResult, target: Path, interval: int
) -> str:
    name = _free_name(target, session.branch + REPRO_SUFFIX)
    world, _ = minimizer.start_world(minimizer.best)
    info = session.reader.catalog.branches.get(session.branch, {})
    overrides = dict(result.overrides)
    writer = RecordingWriter.append(target)
    writer.frame(
        FrameType.BRANCH,
        {
            "name": name,
            "parent": info.get("parent", MAIN_BRANCH),
            "at_events": world.events_processed,
            "at_ns": world.t_ns,
            "changes": [f"minimized {session.branch}: faults kept {', '.join(result.faults_kept) or 'none'}"],
            "request": {"minimized_from": session.branch, "faults_kept": list(result.faults_kept)},
            "overrides": [[node, site, index, value] for (node, site, index), value in overrides.items()],
            "branch_key": world.branch_key,
        },
    )
    recorder = Recorder(
        session.scenario,
        world,
        target,
        snapshot_every_events=interval,
        overrides=overrides or None,
        branch=name,
        writer=writer,
        determinism=session.determinism,
        simulation_factory=session.simulation,
    )
    _, end = recorder.run_to_end()
    if end["failure"] is None or end["failure"]["signature"] != result.signature:
        raise AssertionError(f"the minimized branch recorded as {end['failure']}, not {result.signature}")
    return name


def _free_name(path: Path, wanted: str) -> str:
    with RecordingReader.open(path) as reader:
        taken = {MAIN_BRANCH, *reader.catalog.branches}
    for number in range(1, REPRO_NAMES_MAX + 1):
        name = wanted if number == 1 else f"{wanted}{number}"
        if name not in taken:
            return name
    raise ValueError(f"{path}: more than {REPRO_NAMES_MAX} minimized branches named {wanted}")
