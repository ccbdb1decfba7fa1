"""``timetravel bench minimize``: how well and how fast the minimizer shrinks a known bug.

**planted2**: the ``needle`` scenario hides a bug that needs two faults together (a dropped ack,
then a restart of the same worker before the retransmit) among 100 decoy faults that cannot
cause it. The minimizer must come back with exactly those two fault ids (``planted2_exact``)
within 300 runs, the ddmin pass included (``planted2_runs``). The same is checked over
``planted2_seeds`` seeds (each seed hides the pair at another worker and round) so the figure is
not one lucky schedule.

**haystack**: the same bug over the fabric (timetravel/bench/haystack.py): the planted pair among
60 fabric decoys, a third of which draw a coin for every ack they match and never fire. Deleting
one must not change what another fault does (each fault draws on sites of its own), so the
minimizer must come back with exactly the pair (``haystack_exact_seeds`` of ``haystack_seeds``)
in at most 300 runs on every seed (``haystack_runs_max``). The planted drop fires with
probability 1/2, so about half the seeds fail at all; the bench takes the first
HAYSTACK_SEEDS (quick: HAYSTACK_SEEDS_QUICK) failing seeds from 0 up and says how many it tried.

**race_repro**: a ``dp_training`` run with the planted ``missing_wait`` bug (the compute stream
does not wait for the reduced gradient) fails with a stream race on 16 ranks. It is recorded, then
minimized *from the recording* (``minimize_run``: the passes, the repro recording, the snapshot
pass, the pytest file), and must shrink to at most RACE_RANKS_TARGET ranks (``race_repro_ranks``):
the race lives between two streams of one GPU, so the minimizer should find that one rank shows it.
The generated pytest file is run: it is a regression test, so it must fail while the bug is there,
naming the signature (``race_repro_pytest_red``), and pass once the bug is switched off in the
restored world, the stand-in for a fix (``race_repro_pytest_green_when_fixed``).

Runs are counted, not timed: a count is a property of the algorithm, while seconds on a shared
2-core machine are noise (they are reported too, as measured).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import timetravel
from timetravel.bench import haystack
from timetravel.explore.minimize import minimize
from timetravel.explore.minimize_run import minimize_run
from timetravel.explore.minimize_trials import Budget, Candidate, MinimizeResult, run_candidate
from timetravel.explore.session import Session
from timetravel.recording.record_run import record_run
from timetravel.scenarios import get_scenario, scenario_names
from timetravel.sim.runner import build_world

PLANTED_KINDS = ("drop", "restart")
PLANTED_SEED = 0
PLANTED_SEEDS = 10
PLANTED_SEEDS_QUICK = 3
PLANTED_RUNS_TARGET = 300
DECOYS = 100
HAYSTACK_SEEDS = 10
HAYSTACK_SEEDS_QUICK = 3
HAYSTACK_SEEDS_TRIED_MAX = 100
RACE_SCENARIO = "dp_training"
RACE_SETTINGS = {"bug": "missing_wait"}
RACE_SEED = 0
RACE_RANKS_TARGET = 4
RACE_RUNS_MAX = 500
PYTEST_SECONDS_MAX = 300


def planted_ids(seed: int, config: dict[str, Any]) -> list[str]:
    """The ids of the two planted faults in this seed's schedule (known by construction)."""
    scenario = get_scenario("needle")
    world = build_world(scenario, config, seed)
    return [record["id"] for record in world.faults if record["kind"] in PLANTED_KINDS]


def minimize_planted(seed: int) -> tuple[MinimizeResult, list[str], float]:
    scenario = get_scenario("needle")
    config = scenario.resolve_config({"decoys": DECOYS})
    expected = planted_ids(seed, config)
    started = time.perf_counter()
    result = minimize(scenario, config, seed, budget=Budget(max_runs=PLANTED_RUNS_TARGET * 4))
    return result, expected, time.perf_counter() - started


def haystack_seeds(count: int) -> list[int]:
    """The first ``count`` seeds (from 0) whose haystack schedule fails, and how many were tried."""
    scenario = haystack.SCENARIO
    config = scenario.resolve_config({})
    seeds: list[int] = []
    for seed in range(HAYSTACK_SEEDS_TRIED_MAX):
        if len(seeds) == count:
            break
        trial = run_candidate(scenario, seed, Candidate(config))
        if trial.failure is not None:
            seeds.append(seed)
    return seeds


def minimize_haystack(seed: int) -> tuple[MinimizeResult, list[str]]:
    scenario = haystack.SCENARIO
    config = scenario.resolve_config({})
    expected = haystack.planted_ids(build_world(scenario, config, seed))
    result = minimize(scenario, config, seed, budget=Budget(max_runs=PLANTED_RUNS_TARGET * 4))
    return result, expected


def haystack_figures(quick: bool) -> dict[str, Any]:
    seeds = haystack_seeds(HAYSTACK_SEEDS_QUICK if quick else HAYSTACK_SEEDS)
    started = time.perf_counter()
    exact = 0
    runs: list[int] = []
    for seed in seeds:
        result, expected = minimize_haystack(seed)
        exact += sorted(result.faults_kept) == sorted(expected)
        runs.append(result.runs)
    return {
        "haystack_seeds": seeds,
        "haystack_seeds_tried": seeds[-1] + 1 if seeds else HAYSTACK_SEEDS_TRIED_MAX,
        "haystack_decoys": haystack.DECOYS_DEFAULT,
        "haystack_exact_seeds": exact,
        "haystack_runs_mean": round(sum(runs) / len(runs), 1) if runs else 0,
        "haystack_runs_max": max(runs, default=0),
        "haystack_runs_target": PLANTED_RUNS_TARGET,
        "haystack_seconds": round(time.perf_counter() - started, 3),
    }


def race_repro(folder: Path) -> dict[str, Any]:
    """Record the missing-wait race, minimize it from the recording, run the pytest it writes."""
    scenario = get_scenario(RACE_SCENARIO)
    config = scenario.resolve_config(RACE_SETTINGS)
    recording = folder / "race.ttr"
    report, _ = record_run(scenario, config, RACE_SEED, recording)
    started = time.perf_counter()
    with Session.open(recording) as session:
        result = minimize_run(
            session,
            out=folder / "race-min.ttr",
            pytest=folder / "test_race_min.py",
            budget=Budget(max_runs=RACE_RUNS_MAX),
        )
    seconds = time.perf_counter() - started
    return {
        "race_repro_signature": result.signature,
        "race_repro_ranks_before": config["ranks"],
        "race_repro_ranks": result.config["ranks"],
        "race_repro_ranks_target": RACE_RANKS_TARGET,
        "race_repro_steps_before": config["steps"],
        "race_repro_steps": result.config["steps"],
        "race_repro_events_before": report["events"],
        "race_repro_events": result.events,
        "race_repro_start_events": result.start_events,
        "race_repro_runs": result.runs,
        "race_repro_seconds": round(seconds, 3),
        "race_repro_pytest_red": _pytest_red(folder / "test_race_min.py", result.signature),
        "race_repro_pytest_green_when_fixed": _pytest_green_when_fixed(folder / "test_race_min.py"),
    }


FIX_LINE = "        world.config['bug'] = 'none'  # the fix\n"
RESTORE_LINE = "        world = session.snapshot_world(position)\n"


def _pytest_red(path: Path, signature: str) -> bool:
    """The generated test fails while the bug is there, naming the recorded signature."""
    completed = _run_pytest(path)
    return completed.returncode == 1 and f"fails with {signature}" in completed.stdout


def _pytest_green_when_fixed(path: Path) -> bool:
    """The same test passes once the planted bug is switched off in the restored world."""
    fixed = path.with_name("test_race_min_fixed.py")
    fixed.write_text(path.read_text().replace(RESTORE_LINE, RESTORE_LINE + FIX_LINE))
    return _run_pytest(fixed).returncode == 0


def _run_pytest(path: Path) -> subprocess.CompletedProcess[str]:
    """Run a generated repro test in a fresh interpreter, as its user would."""
    package_root = str(Path(timetravel.__file__).resolve().parent.parent)
    environment = {**os.environ, "PYTHONPATH": package_root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=path.parent,
        timeout=PYTEST_SECONDS_MAX,
    )
    return completed


def run_bench(quick: bool = False) -> dict[str, Any]:
    result, expected, seconds = minimize_planted(PLANTED_SEED)
    figures: dict[str, Any] = {
        "planted2_exact": sorted(result.faults_kept) == sorted(expected),
        "planted2_runs": result.runs,
        "planted2_runs_target": PLANTED_RUNS_TARGET,
        "planted2_faults_before": result.faults_before,
        "planted2_faults_after": result.faults_after,
        "planted2_choices_before": result.choices_before,
        "planted2_choices_after": result.choices_after,
        "planted2_seconds": round(seconds, 3),
    }
    seeds = PLANTED_SEEDS_QUICK if quick else PLANTED_SEEDS
    exact = 0
    runs: list[int] = []
    for seed in range(seeds):
        seed_result, seed_expected, _ = minimize_planted(seed)
        exact += sorted(seed_result.faults_kept) == sorted(seed_expected)
        runs.append(seed_result.runs)
    figures.update(
        planted2_seeds=seeds,
        planted2_exact_seeds=exact,
        planted2_runs_mean=round(sum(runs) / len(runs), 1),
        planted2_runs_max=max(runs),
    )
    figures.update(haystack_figures(quick))
    if RACE_SCENARIO in scenario_names():
        with tempfile.TemporaryDirectory(prefix="timetravel-bench-") as folder:
            figures.update(race_repro(Path(folder)))
    else:
        figures["race_repro_ranks"] = f"not measured: scenario {RACE_SCENARIO} is not in this build"
    return {"bench": "minimize", "figures": figures}
