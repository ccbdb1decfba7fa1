"""``timetravel bench farm``: sweep throughput with 1 and 2 local workers, and Dask's overhead.

The workload is ``dp_training --set preset=demo`` when that scenario is installed (the sweep users
run), else ``gossip`` at its defaults (~18,000 events a seed); ``figures["scenario"]`` says which.
Each figure is the best of a few sweeps of the same seeds into a fresh findings database (the 1-
and 2-worker sweeps interleaved), so it includes what a real sweep pays: starting workers,
shipping jobs, committing rows.

* ``scaling_2_vs_1``: seeds/s with 2 workers over seeds/s with 1 (2.0 is perfect; the target is
  >= 1.8 on a 2-core machine with nothing else running).
* ``dask_overhead_ratio``: a sweep's wall time on a Dask LocalCluster of 2 worker processes over
  the local pool's with 2 workers (1.0 is no overhead). The cluster's start-up is left out (it is
  paid once per sweep and reported as ``dask_startup_s``).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

from timetravel.farm import FindingsDatabase, LocalPool, SweepPlan, parse_seeds, plan_sweep, run_sweep
from timetravel.scenarios import scenario_names

WORKLOADS: dict[str, tuple[list[str], int, int]] = {
    "dp_training": (["preset=demo"], 8, 1),
    "gossip": ([], 48, 3),
}
"""scenario -> (settings, seeds per sweep, repeats); the first one installed is used."""
QUICK_SEEDS = 6


def _workload(quick: bool) -> tuple[str, list[str], int, int]:
    installed = scenario_names()
    for name, (settings, seeds, repeats) in WORKLOADS.items():
        if name in installed:
            return name, settings, (QUICK_SEEDS if quick else seeds), (1 if quick else repeats)
    raise LookupError("no benchmark workload scenario is installed")


def _sweep_s(plan: SweepPlan, make_executor: Any, directory: Path) -> float:
    path = directory / f"bench-{time.monotonic_ns()}.db"
    with FindingsDatabase(path) as database:
        executor = make_executor()
        started = time.perf_counter()
        summary = run_sweep(plan, database, executor)
        wall_s = time.perf_counter() - started
    if summary.ran != len(plan.seeds):
        raise RuntimeError(f"benchmark sweep ran {summary.ran} of {len(plan.seeds)} seeds")
    return wall_s


def run_bench(quick: bool = False) -> dict[str, Any]:
    scenario, settings, seeds, repeats = _workload(quick)
    plan = plan_sweep(scenario, settings, parse_seeds(f"0:{seeds}"))
    figures: dict[str, Any] = {"scenario": " ".join([scenario, *settings]), "seeds": seeds}
    with tempfile.TemporaryDirectory(prefix="timetravel-bench-farm-") as directory:
        folder = Path(directory)
        warm_plan = plan_sweep(scenario, settings, parse_seeds("0:1"))
        _sweep_s(warm_plan, lambda: LocalPool(1), folder)  # starts the fork server once
        one_s = two_s = float("inf")
        for _ in range(repeats):  # interleaved, so a neighbour's burst of load hits both alike
            one_s = min(one_s, _sweep_s(plan, lambda: LocalPool(1), folder))
            two_s = min(two_s, _sweep_s(plan, lambda: LocalPool(2), folder))
        figures["seeds_per_s_1_worker"] = round(seeds / one_s, 2)
        figures["seeds_per_s_2_workers"] = round(seeds / two_s, 2)
        figures["scaling_2_vs_1"] = round(one_s / two_s, 3)
        figures.update(_dask_figures(plan, folder, repeats, two_s))
    return {"bench": "farm", "figures": figures}


def _dask_figures(plan: SweepPlan, folder: Path, repeats: int, local_two_s: float) -> dict[str, Any]:
    try:
        from timetravel.farm.dask_executor import DaskExecutor, DaskSetupError
    except ImportError:  # pragma: no cover - the module itself never needs dask to import
        return {}
    best = float("inf")
    startup = float("inf")
    for _ in range(repeats):
        started = time.perf_counter()
        try:
            executor = DaskExecutor(workers=2)
        except DaskSetupError:
            return {"dask": "not installed (pip install 'timetravel[cluster]')"}
        startup = min(startup, time.perf_counter() - started)
        path = folder / f"bench-dask-{time.monotonic_ns()}.db"
        with FindingsDatabase(path) as database:
            begun = time.perf_counter()
            run_sweep(plan, database, executor)
            best = min(best, time.perf_counter() - begun)
    seeds = len(plan.seeds)
    return {
        "dask_seeds_per_s_2_workers": round(seeds / best, 2),
        "dask_overhead_ratio": round(best / local_two_s, 3),
        "dask_startup_s": round(startup, 2),
    }
