"""The compiled GPU stream engine (fabric/_speedups_gpu*.h: the pump, launch, record, wait and the
``gpu.done`` handler) runs the same streams as the Python one (fabric/gpu.py ``_pump_python``,
``_launch_python``, ...), bit for bit: the same outcome, events, state hash and hash chain
on worlds that start kernels with and without buffer accesses, take waits, complete records, draw
``gpu.order`` flips, stretch kernels by a straggler's compute factor and report races. The
compiled run must also have gone through each of those rare paths (its Python callbacks are
counted), so the comparison is not vacuous."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from timetravel.fabric import gpu, gpu_streams, race, speedups
from timetravel.scenarios import get_scenario
from timetravel.sim import Simulation
from timetravel.sim.kernel import chain_head

pytestmark = pytest.mark.skipif(speedups.compiled is None, reason="fabric's compiled code is not built")

SWARM = {"faults": "swarm", "faults_max": 12, "faults_from": 0, "faults_window": 20_000_000}
WORLDS = {
    "race": {"ranks": 16, "bug": "missing_wait", "steps": 5},
    "order_flips": {"ranks": 16, "bug": "missing_wait", "steps": 6, "race_detector": False},
    "swarm_message": {"ranks": 8, "steps": 12, **SWARM},
    "swarm_collective": {"ranks": 32, "steps": 6, "fabric_level": "collective", **SWARM},
    "tree_jitter": {"ranks": 12, "allreduce": "tree", "steps": 4, "compute_jitter": 200_000},
    "ring_collective": {"ranks": 300, "allreduce": "ring", "steps": 2, "fabric_level": "collective"},
}


def _run(settings: dict[str, Any], seed: int) -> tuple[Any, ...]:
    scenario = get_scenario("dp_training")
    world = scenario.build(scenario.resolve_config(settings), seed)
    result = Simulation(scenario, world).run()
    failures = [(failure["kind"], failure["message"]) for failure in world.failures]
    return result.outcome, result.events, str(world.state_hash()), str(chain_head(world)), failures


@pytest.fixture
def callbacks() -> Iterator[Counter[str]]:
    """Hand the compiled pump counting wrappers of its Python callbacks, then the real ones again."""
    assert speedups.compiled is not None
    counts: Counter[str] = Counter()

    def counted(name: str, function: Any) -> Any:
        def wrapper(*args: Any) -> Any:
            counts[name] += 1
            return function(*args)

        return wrapper

    def configure(wrap: bool) -> None:
        functions = [gpu_streams.pump_python, gpu_streams.draw_completion_order, race._report, math.ceil]
        names = ["python_pump", "draw_order", "report", "ceil"]
        unhandled = gpu_streams.report_unhandled
        if wrap:
            functions = [counted(name, function) for name, function in zip(names, functions, strict=True)]
            unhandled = counted("unhandled", unhandled)
        speedups.compiled.configure_gpu(  # type: ignore[union-attr]
            *functions,
            gpu.DONE_KIND,
            race.TRACKED_BUFFERS_MAX,
            unhandled,
            gpu_streams.STREAM_OPS_MAX,
            gpu_streams.stream_of,
            gpu_streams.event_entry,
        )

    configure(wrap=True)
    try:
        yield counts
    finally:
        configure(wrap=False)


def _use_python_engine(patch: pytest.MonkeyPatch) -> None:
    patch.setattr(gpu_streams, "pump", gpu_streams.pump_python)
    patch.setattr(gpu, "_engine", None)


def test_the_compiled_engine_is_the_one_that_runs() -> None:
    assert speedups.compiled is not None
    assert gpu_streams.pump is speedups.compiled.gpu_pump
    assert gpu._engine is speedups.compiled


@pytest.mark.parametrize("seed", [0, 3, 5])
def test_compiled_and_python_pumps_give_the_same_bits(
    seed: int, callbacks: Counter[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    compiled = {name: _run(settings, seed) for name, settings in WORLDS.items()}
    seen = dict(callbacks)
    _use_python_engine(monkeypatch)
    python = {name: _run(settings, seed) for name, settings in WORLDS.items()}
    assert compiled == python
    assert compiled["race"][0] == "fail" and compiled["race"][4][0][0] == "race"
    assert seen.get("report", 0) >= 1
    assert seen.get("draw_order", 0) >= 1
    assert seen.get("python_pump", 0) == 0


def test_a_straggler_compute_factor_goes_through_pythons_ceil(callbacks: Counter[str]) -> None:
    """A ``slow`` fault stretches kernels by a float factor: the compiled pump rounds as Python does."""
    settings = {
        "ranks": 8,
        "steps": 4,
        "faults": [
            {
                "kind": "slow",
                "target": "r3",
                "t_start": "0ms",
                "t_end": "500ms",
                "params": {"compute_factor": 3.7, "bandwidth_factor": 1.0},
            }
        ],
    }
    compiled = _run(settings, 0)
    assert callbacks["ceil"] >= 1
    with pytest.MonkeyPatch.context() as patch:
        _use_python_engine(patch)
        assert _run(settings, 0) == compiled


def test_a_context_that_is_not_the_compiled_one_gets_the_python_pump(callbacks: Counter[str]) -> None:
    class Plain:
        now = 0
        node = "r0"

    state = gpu.new_gpu_state()
    assert speedups.compiled is not None
    speedups.compiled.gpu_pump(state, Plain())
    assert callbacks["python_pump"] == 1
