"""Removing one fault never changes what another fault does: each fault draws on sites of its own.

A minimizer deletes faults one at a time and asks "does it still fail?". If fault draws were keyed
by (sender, kind, draw number), deleting a decoy that only drew coins would shift the coins of the
fault that matters, and the failure could vanish for a reason unrelated to the deleted decoy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import slow_size
from fabric_probe import arrivals, probe_scenario, probe_world, run

from timetravel.bench import haystack
from timetravel.bench.minimize import HAYSTACK_SEEDS, HAYSTACK_SEEDS_QUICK, haystack_seeds, minimize_haystack

MESSAGES = 40


def _sends() -> list[list[Any]]:
    return [["r2", "msg", number, 64] for number in range(MESSAGES)]


def _drop(fault_id: str, probability: float, **params: Any) -> dict[str, Any]:
    return {
        "id": fault_id,
        "kind": "drop",
        "target": "r0",
        "t_start": 0,
        "t_end": 1_000_000,
        "params": {"probability": probability, **params},
    }


def _delivered(faults: list[dict[str, Any]], seed: int = 3, **settings: Any) -> list[Any]:
    scenario = probe_scenario()
    world = probe_world(scenario, seed=seed, faults=faults, **settings)
    world.schedule(10, "r0", "go", _sends())
    run(scenario, world)
    return [entry[2] for entry in arrivals(world, "r2")]


def test_a_fault_drops_the_same_messages_with_or_without_a_decoy_that_draws_coins() -> None:
    culprit = _drop("f2", 0.5)
    alone = _delivered([culprit])
    assert 0 < len(alone) < MESSAGES  # the coin matters: some messages dropped, some not
    with_decoy = _delivered([_drop("f1", 0.0), culprit])  # probability 0: draws a coin, never fires
    assert with_decoy == alone


def test_a_fault_draws_its_coin_even_when_an_earlier_fault_took_the_message() -> None:
    everything = set(range(MESSAGES))
    first, second = _drop("f1", 0.5), _drop("f2", 0.5)
    dropped_by_first = everything - set(_delivered([first]))
    dropped_by_second = everything - set(_delivered([second]))
    assert dropped_by_first != dropped_by_second
    # with both, a message arrives when neither would have dropped it on its own
    assert set(_delivered([first, second])) == everything - dropped_by_first - dropped_by_second


def _jitter_draws(faults: Any) -> tuple[list[list[Any]], list[str]]:
    scenario = probe_scenario()
    world = probe_world(scenario, seed=5, faults=faults, network_jitter=5_000)
    world.schedule(10, "r0", "go", _sends())
    log: list[list[Any]] = []
    run(scenario, world, choice_log=log)
    jitter = [entry for entry in log if entry[0] == "r0" and entry[1] == "fabric.jitter"]
    return jitter, sorted({entry[1] for entry in log if entry[1].startswith("fault.")})


def test_a_drop_does_not_shift_the_senders_jitter() -> None:
    without, _ = _jitter_draws("none")
    with_drop, fault_sites = _jitter_draws([_drop("f2", 0.5)])
    assert len(without) == MESSAGES
    assert with_drop == without  # a dropped message drew its jitter too: the next send's is unmoved
    assert fault_sites == ["fault.f2.drop"]  # the fault's coins are on a site named by its id


def test_a_buffer_flip_chooses_the_same_bit_whatever_other_corruption_did_before() -> None:
    def flipped(faults: list[dict[str, Any]]) -> bytes:
        scenario = probe_scenario()
        world = probe_world(scenario, seed=2, faults=faults)
        world.nodes["r0"]["buffers"]["grad"] = np.zeros(1024, np.float32)
        world.schedule(10, "r0", "go", _sends())
        run(scenario, world)
        return world.nodes["r0"]["buffers"]["grad"].tobytes()

    flip = {"id": "f3", "kind": "corrupt", "target": "r0", "t_start": 50_000, "params": {"buffer": "grad"}}
    in_flight = {
        "id": "f1",
        "kind": "corrupt",
        "target": "r0",
        "t_start": 0,
        "t_end": 40_000,
        "params": {"count": None},
    }
    alone = flipped([flip])
    assert alone != np.zeros(1024, np.float32).tobytes()
    assert flipped([in_flight, flip]) == alone  # the in-flight fault's element draws are its own


def test_haystack_decoys_cannot_cause_the_failure_and_the_planted_pair_does() -> None:
    scenario = haystack.SCENARIO
    config = scenario.resolve_config({})
    seed = haystack_seeds(1)[0]
    world = scenario.build(config, seed)
    pair = haystack.planted_ids(world)
    assert len(pair) == 2 and len(world.faults) == haystack.DECOYS_DEFAULT + 2
    coin_decoys = [r for r in world.faults if r["kind"] == "drop" and r["params"]["probability"] == 0.0]
    assert len(coin_decoys) == haystack.DECOYS_DEFAULT // haystack.COIN_DECOY_SHARE
    records = {record["id"]: record for record in world.faults}

    def fails(ids: list[str], bug: str = "replay_after_restart") -> bool:
        candidate = scenario.resolve_config({"faults": [records[i] for i in ids], "bug": bug})
        from timetravel.sim.runner import run_report

        return run_report(scenario, candidate, seed)[0]["outcome"] == "fail"

    assert fails(pair)
    assert not fails([fault_id for fault_id in records if fault_id not in pair])
    assert not fails(list(records), bug="none")


@pytest.mark.slow
def test_bench_minimize_finds_exactly_the_planted_pair_among_60_decoys_on_every_seed() -> None:
    """On every seed of `bench minimize` (quick: the first 3 failing seeds under TIMETRAVEL_SLOW=ci)."""
    count = HAYSTACK_SEEDS if slow_size() == "full" else HAYSTACK_SEEDS_QUICK
    seeds = haystack_seeds(count)
    assert len(seeds) == count
    for seed in seeds:
        result, expected = minimize_haystack(seed)
        assert sorted(result.faults_kept) == sorted(expected), (seed, result.faults_kept)
        assert result.runs <= 300, (seed, result.runs)
