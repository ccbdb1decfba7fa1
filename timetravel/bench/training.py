"""``timetravel bench training``: dp_training at scale (ring at 64 and 1024 ranks, tree at 10,000,
and the ``realistic`` preset's simulated seconds per wall second).

Each workload runs in a fresh process (``multiprocessing`` with the ``spawn`` start method), so that
its peak resident memory is its own and not the high-water mark of an earlier, larger workload.
The child builds the world, runs it to the end with the hash chain on (as ``timetravel run``
does) and reports wall seconds for the build and the run, events, simulated time and
``ru_maxrss``. Wall time is read in the child, outside the simulation path.

Figures per workload ``W`` (``ring_64`` at the message level and ``ring_64_collective`` beside it,
``ring_1024`` and ``tree_10000`` at the collective level (``fabric_level=auto`` picks it from 256
ranks on), ``realistic``: 64 ranks timed as GPT-2 XL's DDP step on H100s):

* ``W_events_per_s``: events of the run over its wall time;
* ``W_step_wall_s``: wall seconds per training step (run wall time / steps);
* ``W_step_cpu_s``: CPU seconds of the process per step (on a shared machine the wall figure
  measures the neighbours too; the CPU figure is what an idle core would take, roughly);
* ``W_sim_per_wall``: simulated time over wall time (how much faster or slower than real time);
* ``W_peak_rss_gib``: peak resident memory of the process (Python, numpy, the world);
* ``W_build_s``: building the world (model replicas, data shards, neighbour tables);
* ``W_fabric_level``: the level the run used.

plus ``peak_rss_gib``, the largest of them, and the seek figures of a recorded ``tree_10000``
(``seek_10000_p95_ms`` and its neighbours: bench/training_seek.py; ``quick``: 1,000 ranks). Targets (issue 18): ``ring_1024_step_wall_s`` <= 1.0,
``tree_10000_step_wall_s`` <= 1.0 within 16 GiB, ``realistic_sim_per_wall`` >= 10 (24 is "three
days of training in three hours"). Every workload is the best of REPEATS runs, each in its own
process: on a shared 2-core VM one run of the same code reads 0.87–1.2 s a step for tree_10000
(neighbours, the host), and the best of three is the figure that tells code changes apart, as
for the other benches. (The large workloads once ran once, when a run took minutes; tree_10000's
whole process now takes ~5 s.) ``quick`` shrinks every workload (the
keys then carry the smaller sizes): a smoke test, not a figure.
"""

from __future__ import annotations

import multiprocessing
import resource
import sys
import time
from typing import Any

REPEATS = 3
KIB_PER_GIB = 1024 * 1024
RING_64 = {"ranks": 64, "allreduce": "ring", "params": 2048, "steps": 5}
WORKLOADS: tuple[tuple[str, dict[str, Any], int], ...] = (
    ("ring_64", RING_64, REPEATS),
    ("ring_64_collective", {**RING_64, "fabric_level": "collective"}, REPEATS),
    ("ring_1024", {"ranks": 1024, "allreduce": "ring", "params": 2048, "steps": 3}, REPEATS),
    ("tree_10000", {"ranks": 10_000, "allreduce": "tree", "params": 256, "steps": 3}, REPEATS),
    ("realistic", {"preset": "realistic", "steps": 30}, REPEATS),
)
QUICK_WORKLOADS: tuple[tuple[str, dict[str, Any], int], ...] = (
    ("ring_16", {"ranks": 16, "allreduce": "ring", "params": 2048, "steps": 2}, 1),
    ("ring_128", {"ranks": 128, "allreduce": "ring", "params": 2048, "steps": 1}, 1),
    (
        "tree_1000",
        {"ranks": 1000, "allreduce": "tree", "params": 256, "steps": 1, "fabric_level": "collective"},
        1,
    ),
    ("realistic", {"preset": "realistic", "steps": 3}, 1),
)


def measure_workload(settings: dict[str, Any]) -> dict[str, Any]:
    """Build and run one dp_training world in this process; return its raw measurements."""
    from timetravel.scenarios import get_scenario
    from timetravel.scenarios.dp_training.params import collective_level
    from timetravel.sim import Simulation

    scenario = get_scenario("dp_training")
    config = scenario.resolve_config(settings)
    started = time.perf_counter()
    world = scenario.build(config, 0)
    built = time.perf_counter()
    cpu_started = time.process_time()
    result = Simulation(scenario, world).run()
    finished = time.perf_counter()
    cpu_s = time.process_time() - cpu_started
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    if sys.platform == "darwin":  # pragma: no cover - macOS reports bytes
        rss_kib //= 1024
    return {
        "outcome": result.outcome,
        "events": result.events,
        "t_end_ns": result.t_end_ns,
        "build_s": built - started,
        "run_s": finished - built,
        "run_cpu_s": cpu_s,
        "steps": world.nodes["r0"]["step"],
        "peak_rss_kib": rss_kib,
        "fabric_level": "collective" if collective_level(config) else "message",
    }


def _in_fresh_process(settings: dict[str, Any]) -> dict[str, Any]:
    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(measure_workload, (settings,))


def _figures(name: str, runs: list[dict[str, Any]]) -> dict[str, Any]:
    best = min(runs, key=lambda run: run["run_s"])
    if best["outcome"] != "pass":
        raise RuntimeError(f"bench workload {name} did not pass: {best}")
    return {
        f"{name}_events": best["events"],
        f"{name}_events_per_s": round(best["events"] / best["run_s"]),
        f"{name}_step_wall_s": round(best["run_s"] / best["steps"], 3),
        f"{name}_step_cpu_s": round(best["run_cpu_s"] / best["steps"], 3),
        f"{name}_sim_per_wall": round(best["t_end_ns"] / 1e9 / best["run_s"], 5),
        f"{name}_peak_rss_gib": round(max(run["peak_rss_kib"] for run in runs) / KIB_PER_GIB, 3),
        f"{name}_build_s": round(min(run["build_s"] for run in runs), 3),
        f"{name}_fabric_level": best["fabric_level"],
    }


def _seeks_in_fresh_process(quick: bool) -> dict[str, Any]:
    from timetravel.bench.training_seek import measure_seeks, seek_settings

    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        return pool.apply(measure_seeks, seek_settings(quick))


def run_bench(quick: bool = False) -> dict[str, Any]:
    """Measure every workload (``quick``: the small set) and return the training figures."""
    figures: dict[str, Any] = {}
    for name, settings, repeats in QUICK_WORKLOADS if quick else WORKLOADS:
        runs = [_in_fresh_process(settings) for _ in range(repeats)]
        figures.update(_figures(name, runs))
    figures.update(_seeks_in_fresh_process(quick))
    figures["peak_rss_gib"] = max(value for key, value in figures.items() if key.endswith("_peak_rss_gib"))
    return {"bench": "training", "figures": figures}
