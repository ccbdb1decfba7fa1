"""The stream engine skips the pump after an operation queued behind a running kernel or a
blocked wait, after a wait on a pending record queued on an idle stream, and after a completion on a stream with nothing queued (fabric/gpu.py
``_enqueue_and_pump``, ``_pump_after_completion``): the same runs, bit for bit, as pumping after
every operation and completion, on worlds that exercise streams, waits, races, order flips and
faults."""

from __future__ import annotations

from typing import Any

import pytest

from timetravel.fabric import gpu, gpu_streams
from timetravel.scenarios import get_scenario
from timetravel.sim import Simulation
from timetravel.sim.kernel import chain_head

SWARM = {"faults": "swarm", "faults_max": 12, "faults_from": 0, "faults_window": 20_000_000}
WORLDS = [
    {"ranks": 16, "bug": "missing_wait", "steps": 5},
    {"ranks": 8, "steps": 12, **SWARM},
    {"ranks": 32, "steps": 6, "fabric_level": "collective", **SWARM},
    {"ranks": 12, "allreduce": "tree", "steps": 4, "compute_jitter": 200_000},
]


def _run(settings: dict[str, Any], seed: int) -> tuple[str, int, str, str]:
    scenario = get_scenario("dp_training")
    world = scenario.build(scenario.resolve_config(settings), seed)
    result = Simulation(scenario, world).run()
    return result.outcome, result.events, str(world.state_hash()), str(chain_head(world))


def _always_pump(
    gpu_state: dict[str, Any], stream: dict[str, Any], op: dict[str, Any], ctx: Any, may_move: bool = True
) -> None:
    stream["queue"].append(op)
    gpu_streams.pump(gpu_state, ctx)


def _always_pump_after_completion(gpu_state: dict[str, Any], _stream: dict[str, Any], ctx: Any) -> None:
    gpu_streams.pump(gpu_state, ctx)


@pytest.mark.parametrize("settings", WORLDS)
@pytest.mark.parametrize("seed", [0, 3])
def test_skipping_idle_pumps_changes_no_bit(
    settings: dict[str, Any], seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(
        gpu, "_engine", None
    )  # the Python engine (the compiled one: test_fabric_gpu_compiled)
    monkeypatch.setattr(gpu_streams, "pump", gpu_streams.pump_python)
    skipped = _run(settings, seed)
    monkeypatch.setattr(gpu_streams, "enqueue_and_pump", _always_pump)
    monkeypatch.setattr(gpu_streams, "pump_after_completion", _always_pump_after_completion)
    assert _run(settings, seed) == skipped
