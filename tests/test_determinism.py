"""Same inputs, same bits: in one process, across processes, across PYTHONHASHSEED values."""

from __future__ import annotations

import json
from collections.abc import Callable
from subprocess import CompletedProcess

import pytest

from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report

SCENARIO_SETTINGS = {
    "pingpong": {"rounds": 300},
    "gossip": {"nodes": 48, "rumors": 12},
}


@pytest.mark.parametrize("name", sorted(SCENARIO_SETTINGS))
def test_same_seed_twice_in_one_process_gives_the_same_bits(name: str) -> None:
    scenario = get_scenario(name)
    config = scenario.resolve_config(SCENARIO_SETTINGS[name])
    first, _ = run_report(scenario, config, 11)
    second, _ = run_report(scenario, config, 11)
    assert first == second
    other, _ = run_report(scenario, config, 12)
    assert other["hash_chain"] != first["hash_chain"]
    assert other["state_hash"] != first["state_hash"]


@pytest.mark.parametrize("name", sorted(SCENARIO_SETTINGS))
def test_two_processes_with_different_hash_seeds_agree(
    name: str, run_cli: Callable[..., CompletedProcess[str]]
) -> None:
    settings = [f"--set={key}={value}" for key, value in SCENARIO_SETTINGS[name].items()]
    reports = []
    for hash_seed in ("0", "12345"):
        completed = run_cli(
            "run", name, "--seed", "11", *settings, "--json", env={"PYTHONHASHSEED": hash_seed}
        )
        assert completed.returncode == 0, completed.stderr
        reports.append(json.loads(completed.stdout))
    assert reports[0]["hash_chain"] == reports[1]["hash_chain"]
    assert reports[0]["state_hash"] == reports[1]["state_hash"]
    scenario = get_scenario(name)
    in_process, _ = run_report(scenario, scenario.resolve_config(SCENARIO_SETTINGS[name]), 11)
    assert in_process["hash_chain"] == reports[0]["hash_chain"]


@pytest.mark.slow
def test_many_seeds_are_distinct_and_repeatable() -> None:
    import os

    seeds = range(40 if os.environ.get("TIMETRAVEL_SLOW") == "full" else 12)
    scenario = get_scenario("gossip")
    config = scenario.resolve_config({"nodes": 24, "rumors": 6})
    chains = [run_report(scenario, config, seed)[0]["hash_chain"] for seed in seeds]
    assert len(set(chains)) == len(chains)
    assert chains == [run_report(scenario, config, seed)[0]["hash_chain"] for seed in seeds]
