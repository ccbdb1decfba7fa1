"""Restarts after a crash (``--max-restarts``): the ``resume_mismatch`` detector, and restarts that
find the same files on every run."""

from __future__ import annotations

import json
from pathlib import Path

import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)

from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.sim.world import World
from timetravel.torch.world import resume
from timetravel.torch.world.specs import launch_naming

ROOT = Path(__file__).resolve().parent.parent
RESUME_DDP = ROOT / "docs" / "examples" / "torch" / "resume_ddp.py"
SCRIPTS = ROOT / "tests" / "torch_scripts"
CRASH_AT_STEP_5 = json.dumps([{"kind": "crash", "target": "r1", "t_start": 2_000_000, "t_end": 2_500_000}])
"""r1 is killed entering the loss all_reduce of step 5 (the checkpoint holds step 4)."""


def simulate(script: Path, *settings: str) -> tuple[dict, World]:
    launch = launch_naming([str(script)])
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={script}", "nproc=2", "rank_output=quiet", *settings])
    # later settings win: nproc=3 in ``settings`` overrides the 2 here
    return run_report(scenario, config, 0, launch=launch)


def crashed(bug: str, *settings: str) -> tuple[dict, World]:
    return simulate(RESUME_DDP, f"args=--bug {bug}", "max_restarts=1", f"faults={CRASH_AT_STEP_5}", *settings)


def test_a_correct_resume_after_a_crash_passes_and_says_it_matched() -> None:
    report, world = crashed("none")
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["restarts"] == 1
    assert any("every step after restart 1 matches" in line[2] for line in world.log)


def test_a_resume_that_forgets_the_sampler_position_is_a_resume_mismatch_naming_the_tensor() -> None:
    failure = crashed("forget_sampler")[1].failures[0]
    assert (failure["kind"], failure["node"]) == ("resume_mismatch", "r0")
    assert failure["step"] == 5 and failure["step_after_restart"] == 1
    assert failure["tensor"] == "0.weight"
    assert failure["loss"]["run"] != failure["loss"]["reference"]  # another batch: another loss
    assert "optimizer step 5 (step 1 after the resume)" in failure["message"]


def test_a_resume_that_forgets_the_optimizer_state_is_caught_where_the_loss_still_agrees() -> None:
    failure = crashed("forget_optimizer")[1].failures[0]
    assert failure["kind"] == "resume_mismatch" and failure["tensor"] == "0.weight"
    assert failure["loss"]["run"] == failure["loss"]["reference"]  # same weights, same batch: the momentum


def test_the_detector_can_be_turned_off() -> None:
    report, _world = crashed("forget_sampler", "detect_resume_mismatch=off")
    assert report["outcome"] == "pass", report["failure"]


def test_the_reference_is_the_run_without_the_crash_faults_only() -> None:
    _report, world = crashed("none")
    config = resume.reference_config(world)
    assert config["faults"] == [] and config["max_restarts"] == 0
    assert config["detect_resume_mismatch"] is True  # its ranks report the same digests as the run's


def test_a_restart_while_ranks_hold_undelivered_results_finds_their_files_and_starts_cleanly() -> None:
    """Two bugs this script caught: the restart killed r1 halfway through its file (a wall-time race),
    and the pending poll of the old incarnation asked the new driver for a result it never had."""
    crash = json.dumps([{"kind": "crash", "target": "r2", "t_end": 250_000}])
    script = SCRIPTS / "settle_before_restart.py"
    report, world = simulate(script, "nproc=3", "max_restarts=1", f"faults={crash}")
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["restarts"] == 1
    assert any("r2 crashed (fault f1) entering barrier" in line[2] for line in world.log)


def test_first_mismatch_aligns_the_restarted_steps_with_the_end_of_the_reference() -> None:
    def history(*digests: str) -> dict:
        return {"count": len(digests), "steps": [{"digest": d, "loss": None} for d in digests]}

    reference = {"0": history("a", "b", "c", "d"), "1": history("a", "b", "c", "d")}
    assert resume.first_mismatch({"0": history("c", "d"), "1": history("c", "d")}, reference, 2) is None
    found = resume.first_mismatch({"0": history("c", "d"), "1": history("c", "x")}, reference, 2)
    assert found is not None and (found["rank"], found["step"], found["after_restart"]) == (1, 4, 2)
    repeated = resume.first_mismatch({"0": history(*"abcde"), "1": history(*"abcd")}, reference, 2)
    assert repeated is not None and repeated["extra_steps"] == 1


FSDP2_CRASH_AT_STEP_5 = json.dumps(
    [{"kind": "crash", "target": "r1", "t_start": 5_100_000, "t_end": 5_400_000}]
)
"""r1 is killed at an all_gather of step 5 (the last dcp checkpoint holds step 4)."""


def test_fsdp2_resumed_through_dcp_matches_and_forgetting_a_shard_s_adam_state_is_caught() -> None:
    script = SCRIPTS / "resume_fsdp2.py"
    settings = ("max_restarts=1", f"faults={FSDP2_CRASH_AT_STEP_5}")
    report, _world = simulate(script, *settings)
    assert report["outcome"] == "pass", report["failure"]
    _report, world = simulate(script, *settings, "args=--forget-optimizer")
    failure = world.failures[0]
    assert (failure["kind"], failure["tensor"]) == ("resume_mismatch", "0.weight")
    # dcp's get_state_dict initialises Adam's state with a zero-lr step() before the load: not a
    # training step, so the first step after the resume is step 5, not 4
    assert (failure["step"], failure["step_after_restart"]) == (5, 1)
