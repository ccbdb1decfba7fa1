"""The example scenario (fabric_example.py) exercises the whole integration API end to end.

Its protocol sums gradients in rank order and pulls what it missed, so every survivable fault must
leave the final weights bit-identical to the fault-free run (the oracle's contract, DESIGN.md),
while corruption and the planted missing wait must be caught.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from fabric_example import SCENARIO

from timetravel import fabric
from timetravel.cli import main as cli_main
from timetravel.sim.runner import run_report


def report(seed: int = 0, **settings: Any) -> dict[str, Any]:
    return run_report(SCENARIO, SCENARIO.resolve_config(settings), seed)[0]


def test_the_fault_free_run_passes_and_repeats_bit_for_bit() -> None:
    first = report(seed=3)
    assert first["outcome"] == "pass" and first["summary"]["steps"] == 3
    assert report(seed=3) == first


def test_canonical_reduction_gives_the_same_weights_on_every_seed_with_different_timing() -> None:
    reports = [report(seed=seed) for seed in range(6)]
    assert len({r["summary"]["weights_hash"] for r in reports}) == 1
    assert len({r["t_end_ns"] for r in reports}) > 1  # jitter and ECMP changed the timing


SURVIVABLE = {
    "drop": {
        "kind": "drop",
        "target": "r1",
        "t_start": "0us",
        "t_end": "150us",
        "params": {"probability": 0.5},
    },
    "delay": {
        "kind": "delay",
        "target": "r2",
        "t_start": "0us",
        "t_end": "150us",
        "params": {"delay_ns": 30000},
    },
    "duplicate": {"kind": "duplicate", "target": "r3", "t_start": "0us", "t_end": "150us"},
    "reorder": {"kind": "reorder", "target": "r4", "t_start": "0us", "t_end": "150us"},
    "slow": {"kind": "slow", "target": "r5", "t_start": "0us", "t_end": "300us"},
    "partition_hold": {
        "kind": "partition",
        "target": "r6",
        "t_start": "30us",
        "t_end": "90us",
        "params": {"mode": "hold"},
    },
    "partition_drop": {
        "kind": "partition",
        "target": "r6",
        "t_start": "30us",
        "t_end": "90us",
        "params": {"scope": "host"},
    },
    "crash_restart": {"kind": "crash", "target": "r7", "t_start": "45us", "t_end": "120us"},
}


@pytest.mark.parametrize("name", SURVIVABLE)
def test_survivable_faults_leave_the_weights_bit_identical(name: str) -> None:
    expected = report()["summary"]["weights_hash"]
    faulty = report(faults=[SURVIVABLE[name]])
    assert faulty["outcome"] == "pass", faulty["failure"]
    [record] = faulty["summary"]["faults"]
    assert record["expected"] == "survivable"
    assert record["hits"] > 0, f"{name} never bit: the test would prove nothing"
    assert faulty["summary"]["weights_hash"] == expected


def test_a_cut_spine_is_routed_around_without_changing_the_weights() -> None:
    # leaf_radix 8 puts each host of 4 GPUs under its own leaf, so gradients cross the 4 spines.
    settings = {"leaf_radix": 8}
    cut = {"kind": "partition", "target": "r0", "t_start": "0us", "t_end": "1s", "params": {"spines": [0]}}
    baseline, base_world = run_report(SCENARIO, SCENARIO.resolve_config(settings), 0)
    faulty, world = run_report(SCENARIO, SCENARIO.resolve_config({**settings, "faults": [cut]}), 0)
    assert (
        faulty["outcome"] == "pass"
        and faulty["summary"]["weights_hash"] == baseline["summary"]["weights_hash"]
    )
    up_base, spines = world.fabric["route"][4], world.fabric["route"][3]
    spine_zero = [up_base + leaf * spines for leaf in range(2)]
    assert [world.fabric["link_busy_until_ns"][link] for link in spine_zero] == [0, 0]
    assert any(base_world.fabric["link_busy_until_ns"][link] for link in spine_zero)


def test_the_crash_hooks_ran_and_the_node_came_back() -> None:
    _, world = run_report(SCENARIO, SCENARIO.resolve_config({"faults": [SURVIVABLE["crash_restart"]]}), 0)
    state = world.nodes["r7"]
    assert (state["crashes"], state["incarnation"], state["faults_seen"]) == (1, 1, 1)
    assert world.down == {} and state["gpu"]["epoch"] == 1


@pytest.mark.parametrize(
    "record",
    [
        {
            "kind": "corrupt",
            "target": "r2",
            "t_start": "0us",
            "t_end": "100us",
            "params": {"kinds": ["grad"]},
        },
        {
            "kind": "corrupt",
            "target": "r2",
            "t_start": "60us",
            "params": {"buffer": "weights", "element": 3, "bit": 30},
        },
    ],
)
def test_silent_corruption_is_detected_as_divergence(record: dict[str, Any]) -> None:
    result = report(faults=[record])
    assert result["failure"] is not None and result["failure"]["kind"] == "divergence"
    assert (
        result["summary"]["faults"][0]["hits"] == 1
        and result["summary"]["faults"][0]["expected"] == "detectable"
    )


def test_an_unknown_buffer_is_refused_up_front() -> None:
    with pytest.raises(Exception, match="unknown buffer 'momentum'"):
        report(faults=[{"kind": "corrupt", "target": "r2", "t_start": 0, "params": {"buffer": "momentum"}}])


def test_the_missing_wait_is_a_race_on_every_seed_and_divergence_without_the_detector() -> None:
    for seed in range(4):
        race = report(seed=seed, bug="missing_wait")
        assert race["failure"]["signature"] == "race:gpu.race.grad"
        assert "'update' on stream 'compute'" in race["failure"]["message"]
        silent = report(seed=seed, bug="missing_wait", race_detector=False)
        assert silent["failure"]["kind"] == "divergence"


def test_swarm_seeds_only_fail_where_a_corruption_bit() -> None:
    outcomes = []
    for seed in range(24):
        result = report(seed=seed, faults="swarm")
        corrupted = any(f["kind"] == "corrupt" and f["hits"] for f in result["summary"]["faults"])
        if not corrupted:
            assert result["outcome"] == "pass", (seed, result["failure"], result["summary"]["faults"])
        else:
            assert result["failure"] is None or result["failure"]["kind"] == "divergence"
        outcomes.append(result["outcome"])
    assert "pass" in outcomes


def test_the_summary_lists_the_schedule_with_hits_and_expected_outcomes() -> None:
    summary = report(faults=[SURVIVABLE["delay"]])["summary"]
    assert summary["faults"][0]["id"] == "f1" and summary["faults"][0]["t_start"] == 0
    assert set(summary["faults"][0]) == {
        "id",
        "kind",
        "target",
        "t_start",
        "t_end",
        "params",
        "hits",
        "expected",
    }
    assert summary["down"] == {}


def test_the_cli_runs_it_by_module_path(capsys: pytest.CaptureFixture[str]) -> None:
    code = cli_main(
        ["run", "fabric_example", "--scenario", "fabric_example:SCENARIO", "--seed", "2", "--json"]
    )
    output = json.loads(capsys.readouterr().out)
    assert code == 0 and output["outcome"] == "pass" and output["summary"]["steps"] == 3


def test_the_handler_table_has_the_fabric_kinds_and_refuses_clashes() -> None:
    assert set(fabric.FABRIC_EVENT_KINDS) <= set(SCENARIO.handlers["rank"])
    with pytest.raises(ValueError, match="'fault', an event kind the fabric handles"):
        fabric.with_handlers({"rank": {"fault": lambda state, event, ctx: None}})


def test_the_faults_command_prints_a_schedule_that_replays_the_swarm_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    base = ["fabric_example", "--scenario", "fabric_example:SCENARIO", "--seed", "1"]
    assert cli_main(["faults", *base, "--set", "faults=swarm"]) == 0
    human = capsys.readouterr().out
    assert human.startswith("fabric_example seed 1: ") and " f1 " in human and "survivable" in human
    assert cli_main(["faults", *base, "--set", "faults=swarm", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    assert listing["seed"] == 1 and listing["faults"] and listing["faults"][0]["id"] == "f1"
    saved = tmp_path / "schedule.json"
    saved.write_text(json.dumps(listing))
    swarm_run = report(seed=1, faults="swarm")
    replayed = run_report(SCENARIO, SCENARIO.resolve_config([f"faults=@{saved}"]), 1)[0]
    assert replayed["hash_chain"] == swarm_run["hash_chain"] and replayed["events"] == swarm_run["events"]


def test_the_minimizer_shrinks_a_swarm_schedule_to_the_one_corruption() -> None:
    from timetravel.explore.minimize import minimize
    from timetravel.explore.minimize_trials import Budget

    config = SCENARIO.resolve_config({"faults": "swarm", "faults_max": 12})
    original, world = run_report(SCENARIO, config, 0)
    assert original["failure"]["signature"] == "divergence:example.end" and len(world.faults) == 8
    result = minimize(SCENARIO, config, 0, budget=Budget(max_runs=200, max_seconds=60))
    assert result.signature == "divergence:example.end"
    [kept] = result.faults_kept
    [record] = [fault for fault in world.faults if fault["id"] == kept]
    assert record["kind"] == "corrupt"  # ids survive shrinking: f3 is still f3


def test_the_public_api_is_what_docs_fabric_md_lists() -> None:
    assert sorted(fabric.__all__) == sorted(
        [
            *("BUFFERS_KEY", "DONE_KIND", "EXPECTED_OUTCOMES", "FABRIC_EVENT_KINDS", "FABRIC_PARAMS"),
            *("FABRIC_PARAM_NAMES", "FAULT_KIND", "FAULT_KINDS", "GPU_KEY", "HELD_KIND", "Hooks", "Topology"),
            "VIEW_STATES",
            *("add_fault", "edit_fault", "event_done", "expected_outcome"),
            *("fabric_params", "fabric_settings", "find_fault"),
            *("finish", "idle", "install", "launch", "record", "remove_fault", "running_kernel", "summary"),
            "schedule_finishes",
            *("transport", "wait", "with_handlers"),
        ]
    )
    assert all(hasattr(fabric, name) for name in fabric.__all__)
