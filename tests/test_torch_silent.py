"""``silent_corruption``: a flip that changed the training and no detector noticed (issue 31, part 2),
and the corruptor swarm that asks it of every seed (docs/torch.md, Detectors)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)
from torch_launch import simulate_world
from torch_recordings import DDP_MLP, torchrun_json

from timetravel.scenarios import get_scenario
from timetravel.sim.runner import build_world
from timetravel.sim.scenario import ConfigError
from timetravel.sim.world import World
from timetravel.torch.world import silent
from timetravel.torch.world.specs import launch_naming

MANTISSA_FLIP = {
    "kind": "corrupt",
    "target": "r1",
    "t_start": 1_000_000,
    "params": {"side": "contribution", "op": "all_reduce", "numel_min": 2, "bit": 12},
}
"""Bit 12 (mantissa) of one element of r1's contribution to the first gradient all_reduce after 1 ms."""
DISCARDED_FLIP = {"kind": "corrupt", "target": "r1", "params": {"side": "contribution", "op": "broadcast"}}
"""r1's input to DDP's first broadcast from r0: a non-root input, which the broadcast discards."""


def simulate(faults: list[dict[str, Any]], *settings: str) -> tuple[dict, World]:
    return simulate_world(DDP_MLP, 4, 0, "args=--steps 6", f"faults={json.dumps(faults)}", *settings)


@pytest.fixture(scope="module")
def mantissa() -> tuple[dict, World]:
    return simulate([MANTISSA_FLIP])


def test_a_flipped_mantissa_bit_in_a_contribution_fails_silent_corruption_naming_the_fault(
    mantissa: tuple[dict, World],
) -> None:
    report, world = mantissa
    failure = world.failures[0]
    assert report["outcome"] == "fail" and failure["kind"] == "silent_corruption", report["failure"]
    assert failure["signature"] == "silent_corruption:torch.fault.silent_corruption"
    assert failure["node"] == "r1" and failure["faults"] == ["f1"]
    assert failure["hits"][0].startswith(
        "fault f1 (corrupt) on r1: all_reduce contribution: element 56 bit 12: "
    )
    # the flip went into the all_reduce of step 3; every replica received the same wrong sum
    assert (failure["step"], failure["tensor"]) == (3, "0.bias")
    assert failure["ranks"] == ["r0", "r1", "r2", "r3"]
    assert failure["detectors_silent"] == ["nan", "divergence"] and failure["detectors_off"] == []
    assert failure["message"].startswith(
        "fault f1 (corrupt on r1, all_reduce contribution: element 56 bit 12: "
    )
    assert failure["message"].endswith(
        "changed the training and no detector noticed: from optimizer step 3 on, parameter 0.bias differs on "
        "every rank from the same seed's run in which the fault fired but wrote nothing; detectors on and "
        "silent: nan, divergence"
    )


def test_the_verdict_is_the_same_bits_in_another_process_with_another_hash_seed(
    mantissa: tuple[dict, World],
) -> None:
    """The reference run is a pure function of the run's inputs: another process, another hash seed."""
    here, _world = mantissa
    arguments = ["--nproc-per-node", "4", "--set", "rank_output=quiet"]
    arguments += ["--set", f"faults={json.dumps([MANTISSA_FLIP])}", str(DDP_MLP), "--steps", "6"]
    there = torchrun_json(arguments, "4242", returncode=1, timeout_s=600)
    assert (there["hash_chain"], there["state_hash"]) == (here["hash_chain"], here["state_hash"])
    assert there["failure"]["message"] == here["failure"]["message"]


def test_a_flip_in_a_discarded_broadcast_input_passes_after_the_comparison() -> None:
    report, world = simulate([DISCARDED_FLIP])
    assert report["outcome"] == "pass", report["failure"]
    assert world.fabric["fault_hits"] == {"f1": 1}
    assert any(
        "silent_corruption: f1 acted; the final parameters equal those of the same seed's run" in line[2]
        for line in world.log
    )


def test_arrival_order_is_the_same_in_the_reference_so_it_raises_no_false_alarm() -> None:
    """The reference keeps the schedule (the flip fires and writes nothing, the delays stay): under
    reduce_order=arrival its sums add up in the run's order, so a flip the model never used passes.
    (A reference without the faults would sum r2's late contributions in another order.)"""
    delay = {"kind": "delay", "target": "r2", "t_start": 500_000, "params": {"delay": 300_000, "count": 6}}
    report, world = simulate([DISCARDED_FLIP, delay], "reduce_order=arrival")
    assert report["outcome"] == "pass", report["failure"]
    assert world.fabric["fault_hits"] == {"f1": 1, "f2": 6}


def test_the_detector_can_be_turned_off_and_then_the_flip_passes_unseen() -> None:
    report, world = simulate([MANTISSA_FLIP], "detect_silent_corruption=off")
    assert report["outcome"] == "pass", report["failure"]
    assert not any("silent_corruption" in str(line[2]) for line in world.log)


def test_a_detector_that_is_off_is_named_as_off() -> None:
    """A result flip on one rank is a divergence; with that detector off, nothing else sees it."""
    flip = {**MANTISSA_FLIP, "params": {**MANTISSA_FLIP["params"], "side": "result"}}
    _report, world = simulate([flip], "detect_divergence=off")
    failure = world.failures[0]
    assert failure["kind"] == "silent_corruption" and failure["ranks"] == ["r1"]
    assert failure["detectors_silent"] == ["nan"] and failure["detectors_off"] == ["divergence"]
    assert "differs on r1 from the same seed's run" in failure["message"]
    assert failure["message"].endswith("detectors on and silent: nan (off: divergence)")


def history(*digests: str, start: int = 0) -> dict[str, Any]:
    """A rank's kept steps from step ``start + 1`` on (the steps before it counted only)."""
    steps = [{"digest": digest, "tensors": [["w", digest]]} for digest in digests]
    return {"count": start + len(digests), "last": digests[-1], "steps": steps, "from": start}


def test_first_difference_names_the_first_step_and_the_ranks_that_differ_there() -> None:
    reference = {"0": history("a", "b", "c"), "1": history("a", "b", "c")}
    assert (
        silent.first_difference({"0": history("a", "b", "c"), "1": history("a", "b", "c")}, reference, 2)
        is None
    )
    found = silent.first_difference({"0": history("a", "x", "y"), "1": history("a", "b", "z")}, reference, 2)
    assert found == {"step": 2, "tensor": "w", "ranks": ["r0"]}
    # a branch that added the fault mid-run kept steps from its hit on: aligned by the count
    late = {"0": history("y", start=2), "1": history("c", start=2)}
    assert silent.first_difference(late, reference, 2) == {"step": 3, "tensor": "w", "ranks": ["r0"]}
    # one more step than the reference: the step the reference never took
    longer = {"0": history("a", "b", "c", "d"), "1": history("a", "b", "c")}
    assert silent.first_difference(longer, reference, 2) == {"step": 4, "tensor": None, "ranks": ["r0"]}


def swarm_world(seed: int, *settings: str) -> World:
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={DDP_MLP}", "nproc=4", "faults=swarm", *settings])
    return build_world(scenario, config, seed, launch_naming([str(DDP_MLP)]))


def test_the_corruptor_swarm_draws_each_seed_s_flips_the_same_way_every_time() -> None:
    schedules = [swarm_world(seed, "faults_window=3ms").faults for seed in range(12)]
    assert schedules == [swarm_world(seed, "faults_window=3ms").faults for seed in range(12)]
    assert len({json.dumps(schedule) for schedule in schedules}) == 12  # another seed, other flips
    for schedule in schedules:
        assert 1 <= len(schedule) <= 2  # faults_max
        for number, record in enumerate(schedule, 1):
            assert record["id"] == f"f{number}" and record["kind"] == "corrupt"
            assert record["target"] in ("r0", "r1", "r2", "r3") and 0 <= record["t_start"] < 3_000_000
            assert (
                record["params"]["side"] in ("contribution", "result") and 0 <= record["params"]["bit"] < 32
            )
    assert swarm_world(0, "faults_max=0").faults == []
    with pytest.raises(ConfigError, match="faults_from"):
        swarm_world(0, "faults_from=5ms", "faults_window=3ms")
