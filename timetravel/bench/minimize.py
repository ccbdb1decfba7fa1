"""``timetravel bench minimize``: how well and how fast the minimizer shrinks a known bug.

**planted2**: the ``needle`` scenario hides a bug that needs two faults together (a dropped ack,
then a restart of the same worker before the retransmit) among 100 decoy faults that cannot
cause it. The minimizer must come back with exactly those two fault ids (``planted2_exact``)
within 300 runs, the ddmin pass included (``planted2_runs``). The same is checked over
``planted2_seeds`` seeds (each seed hides the pair at another worker and round) so the figure is
not one lucky schedule.

Runs are counted, not timed: a count is a property of the algorithm, while seconds on a shared
2-core machine are noise (they are reported too, as measured).
"""

from __future__ import annotations

import time
from typing import Any

from timetravel.explore.minimize import Budget, MinimizeResult, minimize
from timetravel.scenarios import get_scenario
from timetravel.sim.runner import build_world

PLANTED_KINDS = ("drop", "restart")
PLANTED_SEED = 0
PLANTED_SEEDS = 10
PLANTED_SEEDS_QUICK = 3
PLANTED_RUNS_TARGET = 300
DECOYS = 100


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
    return {"bench": "minimize", "figures": figures}
