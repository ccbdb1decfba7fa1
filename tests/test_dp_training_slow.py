"""dp_training's slow tests: seed sweeps that find each planted bug, survivable swarms under the
oracle, the collectives' fidelity at large N, scale, and determinism across processes.

Sized by TIMETRAVEL_SLOW: ``ci`` (a bounded selection that CI runs) or ``full``.
"""

from __future__ import annotations

import resource
from typing import Any

import pytest

from tests.conftest import slow_size
from tests.test_dp_training import one_allreduce
from timetravel.scenarios import get_scenario
from timetravel.scenarios.dp_training import tree
from timetravel.sim.runner import run_report

pytestmark = pytest.mark.slow
SCENARIO = get_scenario("dp_training")
FULL = slow_size() == "full"
SWEEP_SEEDS = 40 if FULL else 10
GIB = 1 << 30


def run(seed: int, settings: dict[str, Any]) -> dict[str, Any]:
    return run_report(SCENARIO, SCENARIO.resolve_config(settings), seed)[0]


def sweep_finds(bug: str, signature: str, settings: dict[str, Any]) -> list[int]:
    """Seeds of a sweep on which ``bug`` fails with ``signature``; each must pass with bug=none."""
    found = [
        seed for seed in range(SWEEP_SEEDS) if _signature(run(seed, {**settings, "bug": bug})) == signature
    ]
    assert found, f"{SWEEP_SEEDS} seeds did not find {bug}"
    for seed in found:
        report = run(seed, {**settings, "bug": "none"})
        assert report["outcome"] == "pass", (seed, report["failure"])
    return found


def _signature(report: dict[str, Any]) -> str | None:
    return report["failure"]["signature"] if report["failure"] else None


SMALL = {"ranks": 8, "steps": 40, "params": 256, "faults": "swarm", "faults_window": 400_000_000}


def test_sweep_finds_local_guard() -> None:
    # a flipped exponent bit in one rank's gradient before the all-reduce: with the bug that rank
    # skips alone and the replicas part; without it every rank skips alike
    settings = {
        **SMALL,
        "faults_kinds": "corrupt",
        "faults_max": 16,
        "dtype": "bfloat16",
        "loss_scale": 32768.0,
        "check_every": 5,
    }
    sweep_finds("local_guard", "divergence:dp_training.divergence", settings)


def test_sweep_finds_missing_wait_on_every_seed() -> None:
    found = sweep_finds("missing_wait", "race:gpu.race.grad", {**SMALL, "faults": "none", "steps": 3})
    assert found == list(range(SWEEP_SEEDS))


def test_sweep_finds_stale_chunk() -> None:
    settings = {**SMALL, "faults_kinds": "drop,partition", "oracle": True}
    sweep_finds("stale_chunk", "oracle:dp_training.oracle", settings)


def test_sweep_finds_restart_without_momentum() -> None:
    settings = {**SMALL, "faults_kinds": "crash", "oracle": True, "checkpoint_every": 5}
    sweep_finds("restart_without_momentum", "oracle:dp_training.oracle", settings)


@pytest.mark.parametrize("algorithm", ["ring", "tree", "naive"])
def test_survivable_swarms_keep_every_step_bit_identical(algorithm: str) -> None:
    settings = {
        **SMALL,
        "allreduce": algorithm,
        "faults_kinds": "partition,slow,crash,drop,duplicate,reorder,delay",
        "faults_max": 12,
        "oracle": True,
    }
    for seed in range(SWEEP_SEEDS):
        report = run(seed, settings)
        assert report["outcome"] == "pass", (seed, report["failure"])


@pytest.mark.parametrize("ranks", [256, 1024] if FULL else [256])
def test_ring_alpha_beta_at_scale(ranks: int) -> None:
    measured_ns, size_bytes, config = one_allreduce(ranks)
    model_ns = 2 * (ranks - 1) * config["network_latency"] + 2 * (ranks - 1) / ranks * size_bytes
    assert abs(measured_ns - model_ns) <= 0.05 * model_ns


@pytest.mark.parametrize("ranks", [255, 1023] if FULL else [255])
def test_tree_model_at_scale(ranks: int) -> None:
    measured_ns, size_bytes, config = one_allreduce(ranks, allreduce="tree", tree_chunk_bytes=1 << 20)
    model_ns = 2 * tree.depth(ranks) * (config["network_latency"] + 2 * size_bytes)
    assert abs(measured_ns - model_ns) <= 0.05 * model_ns


@pytest.mark.parametrize(
    ("settings", "ranks"),
    [
        ({"allreduce": "ring", "params": 2048, "steps": 2 if FULL else 1}, 1024 if FULL else 256),
        ({"allreduce": "tree", "params": 256, "steps": 3 if FULL else 1}, 10_000 if FULL else 2_000),
    ],
    ids=["ring", "tree"],
)
def test_scale_runs_a_few_steps_within_memory(settings: dict[str, Any], ranks: int) -> None:
    report = run(0, {**settings, "ranks": ranks})
    assert report["outcome"] == "pass" and report["summary"]["steps"] == settings["steps"]
    peak_gib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / (1 << 20)
    assert peak_gib < 16


def test_same_seed_same_chain_across_processes(run_cli: Any) -> None:
    seeds = "0:4" if FULL else "0:2"
    completed = run_cli(
        "check-determinism",
        "dp_training",
        "--seeds",
        seeds,
        "--set",
        "ranks=8",
        "--set",
        "steps=6",
        "--set",
        "faults=swarm",
        "--set",
        "reduce_order=arrival",
        "--set",
        "allreduce=tree",
        timeout=600,
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
