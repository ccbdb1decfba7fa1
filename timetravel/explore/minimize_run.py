"""Minimize the failure of a recorded run, and write the repro: a .ttr recording and a pytest file.

``minimize_run(session)`` takes the recorded run's inputs — scenario, config, seed, the choices
the recording pinned — and its failure signature, and runs the minimizer's passes to a fixpoint
(:mod:`timetravel.explore.minimize`: ddmin over the fault schedule, fewer ranks or steps, smaller
fault parameters, choices towards 0), always keeping that signature. Then:

1. **The repro recording.** The minimized run is recorded into ``out`` (a normal .ttr: it opens in
   every front end, replays bit for bit, and carries in its header every choice the minimized run
   forced, so it needs no minimizer to replay). Its snapshots are taken at most every
   REPRO_SNAPSHOT_EVERY_EVENTS_MAX events (about REPRO_SNAPSHOTS over the run), so that a late
   one stands close to the failure.
2. **Where the repro starts.** A repro a user commits must be a regression test: red while the bug
   is there, green once it is fixed. So it must start from a state that holds nothing of the
   failure yet — not the latest snapshot that still fails, which may be taken after the damage is
   in the state (a flipped bit already summed into the weights), so that a fixed code still fails
   from it. The start is the latest snapshot of the repro taken **before the first kept fault
   starts** (its start event still queued) and **before the run leaves the fault-free run** (the
   snapshot's effects key equals that of the same run with the kept faults removed, at the same
   event; explore/effects.py). Two runs check it: from there the failure reproduces with the
   signature, and with the kept faults removed the run passes — the starting state does not hold
   the failure. When a check fails the search walks back, down to the start of the run (and says
   so in ``start_check``). A failure that keeps no fault needs none: the repro starts at #0.
3. **The pytest file** (``pytest``) opens the repro recording, restores that snapshot, runs it and
   asserts that the run **passes**: while the bug is there it fails, naming the recorded
   signature and message; once the bug is fixed it passes, and stays as a regression test.

A **branch** is minimized from its fork instead (:mod:`timetravel.explore.minimize_branch`): its
world was changed mid-run, so every candidate starts from the branch's snapshot at the fork, the
faults still pending there go through ddmin and the choices after it towards 0; the repro
recording is the recording with the minimized future appended as branch ``<branch>-min``.

The runs of the start search count in ``runs``. A cancelled or over-budget minimization still writes
its best candidate so far, and its start is searched the same way (the result says ``partial``).
"""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from timetravel.explore.effects import effects_key
from timetravel.explore.minimize import RUN_EVENTS_FACTOR, RUN_EVENTS_SLACK, minimize
from timetravel.explore.minimize_branch import (
    ForkMinimizer,
    minimize_branch,
    pending_fault_ids,
    record_branch_repro,
    remove_pending_faults,
)
from timetravel.explore.minimize_trials import Budget, MinimizeResult, NothingToMinimize, Progress
from timetravel.explore.repro import write_replay_pytest
from timetravel.explore.session import Session
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.recording.files import check_output_path, is_same_file
from timetravel.recording.recorder import SNAPSHOT_EVERY_EVENTS_MIN, Recorder
from timetravel.recording.replace import RecordingExistsError, check_replaceable
from timetravel.sim.launch import NO_LAUNCH, Launch
from timetravel.sim.runner import build_world

REPRO_SNAPSHOT_EVERY_EVENTS_MAX = 1024
"""Snapshot interval of the repro recording at most (the recording's own when it is smaller)."""
REPRO_SNAPSHOTS = 16
"""About this many snapshots in a repro recording (never closer than SNAPSHOT_EVERY_EVENTS_MIN)."""
SNAPSHOT_PASS = "snapshot"
REPRO_RESERVE_RUNS = 3
"""Runs' worth of the time budget the search leaves for writing the repro: its recording and the
two runs that check where its test starts (``--max-seconds`` bounds the whole command)."""
REPRO_RECORDINGS_MAX = 3
"""Recordings of the repro at most: each again with half as many snapshots while it is larger than
the recording minimized."""
BUDGET_DEFAULT = Budget()


@dataclasses.dataclass(frozen=True)
class ReproStart:
    """Where the repro's pytest starts: the snapshot at event #``events`` of the repro recording."""

    events: int
    t_ns: int
    runs: int
    first: int = 0
    """Where the repro's own history starts (0; a branch's fork)."""
    check: str = ""
    """What the export check found (CHECK_PASSED, CHECK_NO_FAULT, or CHECK_FAILS_WITHOUT and why)."""


def minimize_run(
    session: Session,
    *,
    out: str | Path | None = None,
    pytest: str | Path | None = None,
    budget: Budget = BUDGET_DEFAULT,
    progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    scenario_target: str | None = None,
    force: bool = False,
) -> MinimizeResult:
    """Minimize the recorded failure and write the repro files (see the module docstring).

    ``pytest`` without ``out`` writes the recording next to the test, with the test's name and
    ``.ttr``. ``scenario_target`` (``module:attr``) is how the test loads a scenario that is
    neither built in nor installed. A repro file that exists is refused before any run, unless
    ``force`` (recording/replace.py; the recording a branch is minimized in is appended to, not
    replaced)."""
    if pytest is not None and out is None:
        out = Path(pytest).with_suffix(".ttr")
    check_repro_outputs(session, out, pytest, force=force)
    failure = session.info.failure
    if failure is None:
        raise NothingToMinimize(
            f"{session.info.path}: {session.branch} did not fail (or its end was not recorded): "
            "there is no failure to minimize"
        )
    started = time.monotonic()
    reserve = REPRO_RESERVE_RUNS if out is not None else 0
    result, minimizer = _minimize_recorded(
        session,
        signature=failure["signature"],
        budget=budget,
        progress=progress,
        should_stop=should_stop,
        reserve_runs=reserve,
    )
    if out is None:
        return result
    input_bytes = Path(session.info.path).stat().st_size
    branch = _write_repro_recording(session, minimizer, result, out, input_bytes, force=force)
    start = repro_start(
        session.scenario, out, result.signature, result.faults_kept, should_stop, branch, session.launch
    )
    passes = {
        **result.passes,
        SNAPSHOT_PASS: {"runs": start.runs, "accepted": int(start.events > start.first)},
    }
    result = dataclasses.replace(
        result,
        runs=result.runs + start.runs,
        seconds=time.monotonic() - started,
        passes=passes,
        out=str(out),
        start_events=start.events,
        start_ns=start.t_ns,
        start_check=start.check,
        repro_branch=branch,
        input_bytes=input_bytes,
        out_bytes=Path(out).stat().st_size,
    )
    if pytest is not None:
        written = write_replay_pytest(
            result, pytest, out, start.events, scenario_target, branch=branch, launch=session.launch
        )
        result = dataclasses.replace(result, pytest=written)
    return result


def _write_repro_recording(
    session: Session,
    minimizer: ForkMinimizer | None,
    result: MinimizeResult,
    out: str | Path,
    input_bytes: int,
    *,
    force: bool,
) -> str:
    """Write the repro recording; return the branch it starts on. A minimized branch is recorded as
    a branch of the input; a main run again with fewer snapshots while it is larger than the input."""
    interval = repro_snapshot_interval(
        result.events - session.fork_events,
        int(session.header.get("snapshot_every_events", 0)),
        session.scenario.snapshot_every_events,
    )
    if minimizer is not None:
        return record_branch_repro(session, minimizer, result, out, interval, force=force)
    record_repro(session, result, out, interval, force=force)
    for _ in range(REPRO_RECORDINGS_MAX - 1):  # no larger than the input: fewer snapshots, again
        if Path(out).stat().st_size <= input_bytes or interval >= result.events:
            break
        interval *= 2
        record_repro(session, result, out, interval, force=True)  # over the one it wrote
    return MAIN_BRANCH


def check_repro_outputs(
    session: Session, out: str | Path | None, pytest: str | Path | None, *, force: bool
) -> None:
    """Refuse, before minutes of minimizing, repro files that cannot be written or that exist
    (unless ``force``); a branch's repro appended to its own recording replaces nothing."""
    for path in (out, pytest):
        if path is not None:
            check_output_path(path)
    if out is not None and not is_same_file(out, session.reader.path):
        check_replaceable(out, force=force)
    if pytest is not None and not force and os.path.lexists(pytest):
        raise RecordingExistsError(
            f"{pytest} exists: write the test to another path, or pass --force to replace it"
        )


def _minimize_recorded(session: Session, **options: Any) -> tuple[MinimizeResult, ForkMinimizer | None]:
    """The minimized failure of the session's branch: a branch from its fork (with the ForkMinimizer
    its repro is written from), main from the recorded seed, config and overrides; ``options``:
    :class:`~timetravel.explore.minimize.Minimizer`'s keyword arguments."""
    if session.branch != MAIN_BRANCH:
        return minimize_branch(session, **options)
    header = session.header
    result = minimize(
        session.scenario,
        dict(header["config"]),
        int(header["seed"]),
        session.overrides or None,
        launch=session.launch,
        **options,
    )
    return result, None


def repro_snapshot_interval(events: int, recorded_interval: int, scenario_interval: int | None = None) -> int:
    """About REPRO_SNAPSHOTS snapshots over the minimized run, within the recorder's limits, and never
    denser than the scenario's own default nor the recording minimized (a torch run's snapshots carry
    every rank's training state: its repro has no more of them than its input per event)."""
    ceiling = min(recorded_interval or REPRO_SNAPSHOT_EVERY_EVENTS_MAX, REPRO_SNAPSHOT_EVERY_EVENTS_MAX)
    interval = max(SNAPSHOT_EVERY_EVENTS_MIN, min(events // REPRO_SNAPSHOTS, ceiling))
    if scenario_interval:
        interval = max(interval, scenario_interval, recorded_interval)
    return interval


def record_repro(
    session: Session, result: MinimizeResult, out: str | Path, interval: int, *, force: bool = False
) -> dict[str, Any]:
    """Record the minimized run into ``out`` (over a file there only when ``force``); it must fail
    with the signature again."""
    scenario = session.scenario
    config = scenario.resolve_config(result.config)
    report, _ = _record_with_overrides(session, config, result, out, interval, force)
    recorded = report["failure"]
    if recorded is None or recorded["signature"] != result.signature:
        raise AssertionError(
            f"the minimized run recorded as {recorded and recorded['signature']}, not {result.signature}: "
            "the run is not a pure function of its inputs"
        )
    return report


def _record_with_overrides(
    session: Session,
    config: dict[str, Any],
    result: MinimizeResult,
    out: str | Path,
    interval: int,
    force: bool,
) -> tuple[dict[str, Any], Any]:
    """Record a run with the minimized run's plain overrides (stored in the header)."""
    world = build_world(session.scenario, config, int(session.header["seed"]), session.launch)
    recorder = Recorder(
        session.scenario,
        world,
        out,
        snapshot_every_events=interval,
        overrides=dict(result.overrides) or None,
        determinism=session.determinism,
        simulation_factory=session.simulation,
        replace=force,
    )
    _, end = recorder.run_to_end()
    return {"failure": end["failure"], "events": end["events"]}, world


def repro_start(
    scenario: Any,
    path: str | Path,
    signature: str,
    faults_kept: tuple[str, ...] | list[str],
    should_stop: Callable[[], bool] | None = None,
    branch: str = MAIN_BRANCH,
    launch: Launch = NO_LAUNCH,
) -> ReproStart:
    """Where the repro's pytest starts: the latest snapshot of ``branch`` that still holds nothing
    of the failure (see the module docstring), checked by two runs from it."""
    kept = list(faults_kept)
    runs = 0
    with Session.open(path, scenario=scenario, branch=branch, launch=launch) as repro:
        first = repro.fork_events
        snapshots = repro.snapshots()
        failing_event = repro.end.events
        positions = [p for p, s in enumerate(snapshots) if not s.final and first <= s.events < failing_event]
        if not positions:
            positions = [0]
        if not kept:
            start = snapshots[positions[0]]
            return ReproStart(start.events, start.t_ns, 0, first, CHECK_NO_FAULT)
        clean = _clean_positions(scenario, repro, positions, kept, should_stop)
        for position in reversed(clean):
            snapshot = snapshots[position]
            runs += 2
            with_faults = _run_from(scenario, repro, position, [], failing_event)
            without = _run_from(scenario, repro, position, kept, failing_event)
            if with_faults is not None and with_faults["signature"] == signature and without is None:
                return ReproStart(snapshot.events, snapshot.t_ns, runs, first, CHECK_PASSED)
            if position != clean[0] and should_stop is not None and should_stop():
                break
        start = snapshots[positions[0]]
        without = _run_from(scenario, repro, positions[0], kept, failing_event)
        runs += 1
        check = CHECK_PASSED if without is None else f"{CHECK_FAILS_WITHOUT} ({without['signature']})"
    return ReproStart(start.events, start.t_ns, runs, first, check)


CHECK_PASSED = "passes without the kept faults"
CHECK_NO_FAULT = "no fault kept: the failure needs none, so the repro starts at the beginning"
CHECK_FAILS_WITHOUT = "fails without the kept faults too"


def _clean_positions(
    scenario: Any,
    repro: Session,
    positions: list[int],
    kept: list[str],
    should_stop: Callable[[], bool] | None,
) -> list[int]:
    """The snapshots (first one included) taken before any kept fault started and whose effects equal
    the fault-free run's at the same event: the prefix of ``positions`` that holds nothing of the faults."""
    snapshots = repro.snapshots()
    reference = repro.snapshot_world(positions[0])
    remove_pending_faults(reference, kept)
    simulation = repro.simulation(
        reference, overrides=repro.overrides_at(snapshots[positions[0]].events), chain=False
    )
    clean = [positions[0]]
    for position in positions[1:]:
        if should_stop is not None and should_stop():
            break
        world = repro.snapshot_world(position)
        if any(fault_id not in pending_fault_ids(world) for fault_id in kept):
            break  # a kept fault has started: its effect may be in the state
        target = snapshots[position].events
        if reference.events_processed < target:
            simulation.run(max_events=target - reference.events_processed)
        if reference.events_processed != target or effects_key(reference) != effects_key(world):
            break  # the run has left the fault-free one
        clean.append(position)
    return clean


def _run_from(
    scenario: Any, repro: Session, position: int, removed: list[str], failing_event: int
) -> dict[str, Any] | None:
    """The failure of a run from snapshot ``position`` with the faults ``removed`` (None: it passed)."""
    snapshot = repro.snapshots()[position]
    world = repro.snapshot_world(position)
    remove_pending_faults(world, removed)
    events_max = (failing_event - snapshot.events) * RUN_EVENTS_FACTOR + RUN_EVENTS_SLACK
    outcome = repro.simulation(world, overrides=repro.overrides_at(snapshot.events), chain=False).run(
        max_events=events_max
    )
    if outcome.failure is None and outcome.stop != "drained":
        return {"signature": f"no end within {events_max} events", "message": ""}
    return outcome.failure
