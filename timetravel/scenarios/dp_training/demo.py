"""The demo: what makes a seed a *demo seed*, and the search that finds one.

The story the product tells (DESIGN.md): a fuzz sweep finds a seed whose training run fails at
T≈1000 ms; the user rewinds to T=950, branches a future without the fault that caused it, sees it
pass, and diffs the two worlds down to the corrupted gradient. A seed of the ``demo`` preset
(16 ranks, swarm faults, the planted bug ``local_guard``) is a demo seed when

* the run fails, and the failure is detected in [1000 ms, 1100 ms];
* its root-cause fault starts in (950 ms, 1000 ms); the root cause is the fault whose removal
  from the schedule (everything else, the seed and every other choice unchanged) makes the run
  pass: so it is a cause, not a bystander;
* the detection comes at least DETECTION_STEPS_MIN training steps after the fault fired (the
  symptom shows later, which is why the user needs to rewind);
* the same seed with ``bug=none`` passes (the fault alone is survivable; the bug is what fails).

``DEMO_SEED`` (params.py) is the preset's own seed and a test pins it. A code change that shifts
the choices (a new choice site, a changed step time) can make it stop being one; then
``timetravel demo-seed`` finds the next one (see docs/scenarios/dp_training.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from timetravel.sim.runner import run_report
from timetravel.sim.scenario import Scenario
from timetravel.sim.world import World

NS_PER_MS = 1_000_000
FAULT_AFTER_NS = 950 * NS_PER_MS
FAULT_BEFORE_NS = 1_000 * NS_PER_MS
DETECTED_FROM_NS = 1_000 * NS_PER_MS
DETECTED_UNTIL_NS = 1_100 * NS_PER_MS
DETECTION_STEPS_MIN = 3
SEARCH_SEEDS_MAX = 100_000


@dataclass(frozen=True)
class DemoSeed:
    """Why a seed is a demo seed: its failure, its root-cause fault and the steps in between."""

    seed: int
    failure: dict[str, Any]
    root_cause: dict[str, Any]
    fault_step: int
    detection_step: int
    faults: int

    def to_data(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "failure": self.failure,
            "root_cause": self.root_cause,
            "fault_step": self.fault_step,
            "detection_step": self.detection_step,
            "faults": self.faults,
        }


def _run(scenario: Scenario, settings: dict[str, Any], seed: int) -> tuple[dict[str, Any], World]:
    return run_report(scenario, scenario.resolve_config(settings), seed)


def steps_completed(world: World, t_ns: int) -> int:
    """Training steps rank 0 had completed at ``t_ns`` (from its step-time metric)."""
    return sum(1 for t, _, _ in world.metrics.get("step_time_ns", []) if t <= t_ns)


def check_seed(scenario: Scenario, seed: int, settings: dict[str, Any] | None = None) -> DemoSeed | None:
    """The demo evidence for ``seed`` of the demo preset (plus ``settings``), or None if it is not one."""
    base = {"preset": "demo", **(settings or {})}
    report, world = _run(scenario, base, seed)
    failure = report["failure"]
    if failure is None or not DETECTED_FROM_NS <= failure["t_ns"] <= DETECTED_UNTIL_NS:
        return None
    schedule = [dict(record) for record in world.faults]
    hits = world.fabric.get("fault_hits", {})
    candidates = [
        record
        for record in schedule
        if FAULT_AFTER_NS < record["t_start"] < FAULT_BEFORE_NS and hits.get(record["id"], 0) > 0
    ]
    # faults on the failing rank first (the likely cause), then the latest first
    for record in sorted(candidates, key=lambda item: (item["target"] != failure["node"], -item["t_start"])):
        without = [other for other in schedule if other["id"] != record["id"]]
        if _run(scenario, {**base, "faults": without}, seed)[0]["outcome"] != "pass":
            continue
        fault_step = steps_completed(world, record["t_start"])
        detection_step = steps_completed(world, failure["t_ns"])
        if detection_step - fault_step < DETECTION_STEPS_MIN:
            return None
        if _run(scenario, {**base, "bug": "none"}, seed)[0]["outcome"] != "pass":
            return None
        return DemoSeed(seed, failure, record, fault_step, detection_step, len(schedule))
    return None


def search(scenario: Scenario, seeds: Sequence[int] | range) -> Iterator[DemoSeed]:
    """Every demo seed among ``seeds``, in order (lazily: stop when you have enough)."""
    if len(seeds) > SEARCH_SEEDS_MAX:
        raise ValueError(f"search at most {SEARCH_SEEDS_MAX} seeds at once")
    for seed in seeds:
        found = check_seed(scenario, seed)
        if found is not None:
            yield found
