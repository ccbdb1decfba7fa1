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
2. **The latest snapshot from which the failure reproduces.** Each snapshot of the repro taken
   before the failing event, latest first, is restored *from the file* and run to the end with
   the same future (the same pinned choices); the first one whose run fails with the signature
   is kept as the repro's start (``start_events``), and the pytest file starts there: a
   reproduction of a long run then costs the events after that snapshot, not the whole run. A run
   is a pure function of its world and its choices, so this normally holds for the latest
   snapshot at once; when it does not, the snapshot misses something the run depends on (state
   kept outside the world), and the search walks back, down to the start of the run.
3. **The pytest file** (``pytest``) opens the repro recording, restores that snapshot, runs it and
   asserts the failure signature. It passes while the bug is there; after a fix it fails, which is
   the moment to make it expect a pass and keep it as a regression test.

A **branch** is minimized from its fork instead (:mod:`timetravel.explore.minimize_branch`): its
world was changed mid-run, so every candidate starts from the branch's snapshot at the fork, the
faults still pending there go through ddmin and the choices after it towards 0; the repro
recording is the recording with the minimized future appended as branch ``<branch>-min``.

Runs of the snapshot pass count in ``runs`` and respect the same budget; when the budget is spent
before it, the repro starts at its beginning.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from timetravel.explore.minimize import Budget, MinimizeResult, NothingToMinimize, Progress, minimize
from timetravel.explore.minimize_branch import minimize_branch, record_branch_repro
from timetravel.explore.repro import write_replay_pytest
from timetravel.explore.session import Session
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.recording.recorder import SNAPSHOT_EVERY_EVENTS_MIN, Recorder
from timetravel.sim.kernel import Simulation
from timetravel.sim.runner import build_world

REPRO_SNAPSHOT_EVERY_EVENTS_MAX = 1024
"""Snapshot interval of the repro recording at most (the recording's own when it is smaller)."""
REPRO_SNAPSHOTS = 16
"""About this many snapshots in a repro recording (never closer than SNAPSHOT_EVERY_EVENTS_MIN)."""
SNAPSHOT_PASS = "snapshot"
BUDGET_DEFAULT = Budget()


@dataclasses.dataclass(frozen=True)
class ReproStart:
    """Where the repro's pytest starts: the snapshot at event #``events`` of the repro recording."""

    events: int
    t_ns: int
    runs: int
    first: int = 0
    """Where the repro's own history starts (0; a branch's fork)."""


def minimize_run(
    session: Session,
    *,
    out: str | Path | None = None,
    pytest: str | Path | None = None,
    budget: Budget = BUDGET_DEFAULT,
    progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    scenario_target: str | None = None,
) -> MinimizeResult:
    """Minimize the recorded failure and write the repro files (see the module docstring).

    ``pytest`` without ``out`` writes the recording next to the test, with the test's name and
    ``.ttr``. ``scenario_target`` (``module:attr``) is how the test loads a scenario that is
    neither built in nor installed."""
    failure = session.info.failure
    if failure is None:
        raise NothingToMinimize(
            f"{session.info.path}: {session.branch} did not fail (or its end was not recorded): "
            "there is no failure to minimize"
        )
    started = time.monotonic()
    header = session.header
    on_branch = session.branch != MAIN_BRANCH
    minimizer = None
    if on_branch:
        result, minimizer = minimize_branch(
            session, failure["signature"], budget=budget, progress=progress, should_stop=should_stop
        )
    else:
        result = minimize(
            session.scenario,
            dict(header["config"]),
            int(header["seed"]),
            session.overrides or None,
            signature=failure["signature"],
            budget=budget,
            progress=progress,
            should_stop=should_stop,
        )
    if pytest is not None and out is None:
        out = Path(pytest).with_suffix(".ttr")
    if out is None:
        return result
    interval = repro_snapshot_interval(
        result.events - session.fork_events, int(header.get("snapshot_every_events", 0))
    )
    if minimizer is not None:
        branch = record_branch_repro(session, minimizer, result, out, interval)
    else:
        branch = MAIN_BRANCH
        record_repro(session, result, out, interval)
    remaining = Budget(
        max_runs=max(budget.max_runs - result.runs, 0),
        max_seconds=max(budget.max_seconds - (time.monotonic() - started), 0.0),
        max_stall=budget.max_stall,
    )
    start = latest_reproducing_snapshot(
        session.scenario, out, result.signature, remaining, should_stop, branch
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
        repro_branch=branch,
    )
    if pytest is not None:
        written = write_replay_pytest(result, pytest, out, start.events, scenario_target, branch=branch)
        result = dataclasses.replace(result, pytest=written)
    return result


def repro_snapshot_interval(events: int, recorded_interval: int) -> int:
    """About REPRO_SNAPSHOTS snapshots over the minimized run, within the recorder's limits."""
    ceiling = min(recorded_interval or REPRO_SNAPSHOT_EVERY_EVENTS_MAX, REPRO_SNAPSHOT_EVERY_EVENTS_MAX)
    return max(SNAPSHOT_EVERY_EVENTS_MIN, min(events // REPRO_SNAPSHOTS, ceiling))


def record_repro(session: Session, result: MinimizeResult, out: str | Path, interval: int) -> dict[str, Any]:
    """Record the minimized run into ``out``; it must fail with the signature again."""
    scenario = session.scenario
    config = scenario.resolve_config(result.config)
    report, _ = _record_with_overrides(session, config, result, out, interval)
    recorded = report["failure"]
    if recorded is None or recorded["signature"] != result.signature:
        raise AssertionError(
            f"the minimized run recorded as {recorded and recorded['signature']}, not {result.signature}: "
            "the run is not a pure function of its inputs"
        )
    return report


def _record_with_overrides(
    session: Session, config: dict[str, Any], result: MinimizeResult, out: str | Path, interval: int
) -> tuple[dict[str, Any], Any]:
    """Record a run with the minimized run's plain overrides (stored in the header)."""
    world = build_world(session.scenario, config, int(session.header["seed"]))
    recorder = Recorder(
        session.scenario,
        world,
        out,
        snapshot_every_events=interval,
        overrides=dict(result.overrides) or None,
        determinism=session.determinism,
    )
    try:
        run = recorder.run()
    except BaseException:
        recorder.abort()
        raise
    end = recorder.finish(run)
    return {"failure": end["failure"], "events": end["events"]}, world


def latest_reproducing_snapshot(
    scenario: Any,
    path: str | Path,
    signature: str,
    budget: Budget,
    should_stop: Callable[[], bool] | None = None,
    branch: str = MAIN_BRANCH,
) -> ReproStart:
    """The latest snapshot of the repro's ``branch``, before its failing event, from which restoring
    and running the same future fails with ``signature`` (the branch's start when none does or
    the budget runs out: #0, or a branch's fork)."""
    started = time.monotonic()
    runs = 0
    with Session.open(path, scenario=scenario, branch=branch) as repro:
        first = repro.fork_events
        snapshots = repro.snapshots()
        failing_event = repro.end.events
        candidates = [
            (position, snapshot)
            for position, snapshot in enumerate(snapshots)
            if not snapshot.final and first < snapshot.events < failing_event
        ]
        for position, snapshot in reversed(candidates):
            out_of_budget = runs >= budget.max_runs or time.monotonic() - started >= budget.max_seconds
            if out_of_budget or (should_stop is not None and should_stop()):
                break
            runs += 1
            world = repro.snapshot_world(position)
            outcome = Simulation(
                scenario, world, overrides=repro.overrides_at(snapshot.events), chain=False
            ).run(max_events=failing_event - snapshot.events + 1)
            if outcome.failure is not None and outcome.failure["signature"] == signature:
                return ReproStart(snapshot.events, snapshot.t_ns, runs, first)
        start = next((s for s in snapshots if s.events == first and not s.final), snapshots[0])
    return ReproStart(start.events, start.t_ns, runs, first)
