"""``faults_from``: a swarm aimed at a late window of the run, and nothing else moves."""

from __future__ import annotations

import pytest

from timetravel.scenarios import get_scenario
from timetravel.sim import ConfigError

SCENARIO = get_scenario("dp_training")
SWARM = {
    "ranks": 8,
    "steps": 2,
    "params": 256,
    "faults": "swarm",
    "faults_max": 40,
    "faults_kinds": "delay,slow",
}


def schedule(seed: int, **settings: object) -> list[dict[str, object]]:
    return SCENARIO.build(SCENARIO.resolve_config({**SWARM, **settings}), seed).faults


def test_faults_from_moves_every_start_into_the_late_window() -> None:
    seeds = [seed for seed in range(12) if schedule(seed)]
    assert seeds
    for seed in seeds:
        late = schedule(seed, faults_from=900_000_000)
        assert all(900_000_000 <= record["t_start"] < 1_000_000_000 for record in late)
        # the same records (kinds, targets, parameters), only their starts differ
        plain = schedule(seed)
        assert [(r["kind"], r["target"], r["params"]) for r in late] == [
            (r["kind"], r["target"], r["params"]) for r in plain
        ]
    assert schedule(seeds[0], faults_from=0) == schedule(seeds[0])


def test_faults_from_must_be_before_the_window_end() -> None:
    with pytest.raises(ConfigError, match="faults_from"):
        schedule(0, faults_from=1_000_000_000)
