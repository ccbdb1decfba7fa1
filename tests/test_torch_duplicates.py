"""``duplicate_batches``: ranks that train on the same samples, read off the recorded sampler indices
(issue 31, part 6), on docs/examples/torch/ddp_loader.py's planted data bugs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)
from torch_launch import simulate_world
from torch_recordings import real_torchrun

from timetravel.scenarios import get_scenario
from timetravel.sim.context import Context
from timetravel.sim.runner import run_report
from timetravel.sim.world import World
from timetravel.torch.world import duplicates
from timetravel.torch.world.specs import launch_naming

ROOT = Path(__file__).resolve().parent.parent
DDP_LOADER = ROOT / "docs" / "examples" / "torch" / "ddp_loader.py"
STEPS = 14
"""3 ranks share 256 samples: 86 each, 11 batches of 8 an epoch, so step 12 starts the second epoch."""


def simulate(bug: str, *settings: str) -> tuple[dict, World]:
    return simulate_world(DDP_LOADER, 3, 0, f"args=--steps {STEPS} --bug {bug}", *settings)


def final_loss_under_real_torchrun(bug: str) -> float:
    real = real_torchrun(DDP_LOADER, 3, ["--steps", str(STEPS), "--bug", bug])
    assert real.returncode == 0, real.stderr[-2000:]
    return float(real.stdout.strip().splitlines()[-1].split()[-1])


def test_a_ddp_script_without_a_distributed_sampler_warns_and_passes_with_real_torch_s_numbers() -> None:
    report, world = simulate("no_sampler")
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["warnings"] == ["duplicate_batches"]
    warning = world.nodes["c10d"]["warnings"]["duplicate_batches"]
    assert warning["step"] == 1 and len(warning["ranks"]) == 2  # two ranks, the first step
    assert report["summary"]["duplicate_batches"] == (
        f"{warning['ranks'][0]} and {warning['ranks'][1]} received the same 8 sampler indices in optimizer "
        "step 1 (a DataLoader without a DistributedSampler gives every rank the same batches)"
    )
    losses = [value for _t, node, value in world.metrics["allreduce/0/0"] if node == "c10d"]
    assert len(losses) == STEPS  # the loss the script averages and prints (the sum over 3 ranks)
    assert losses[-1] / 3 == pytest.approx(final_loss_under_real_torchrun("no_sampler"), rel=1e-5)


def test_a_sampler_whose_set_epoch_is_never_called_warns_at_the_second_epoch() -> None:
    report, world = simulate("no_set_epoch")
    assert report["outcome"] == "pass", report["failure"]
    warning = world.nodes["c10d"]["warnings"]["duplicate_batches"]
    assert warning["step"] == 12 and warning["ranks"] == [warning["first_rank"]]
    assert warning["detail"] == (
        f"{warning['first_rank']}'s batch in optimizer step 12 repeats its first batch (step 1): its sampler's "
        "order repeats every epoch (DistributedSampler.set_epoch never called?)"
    )


def test_a_correct_distributed_sampler_reshuffled_every_epoch_says_nothing() -> None:
    report, _world = simulate("none")
    assert report["outcome"] == "pass" and report["summary"]["warnings"] == []


def test_detect_duplicate_batches_fail_makes_it_a_failure_and_off_skips_it() -> None:
    report, world = simulate("no_sampler", "detect_duplicate_batches=fail")
    failure = world.failures[0]
    assert (report["outcome"], failure["kind"], failure["step"]) == ("fail", "duplicate_batches", 1)
    assert failure["signature"] == "duplicate_batches:torch.data.duplicate_batches"
    assert failure["node"] in failure["ranks"] and "received the same 8 sampler indices" in failure["message"]
    report, _world = simulate("no_sampler", "detect_duplicate_batches=off")
    assert report["outcome"] == "pass" and report["summary"]["warnings"] == []


def test_a_sequential_sampler_repeats_by_design_and_is_not_reported() -> None:
    """shuffle=False: every epoch starts with indices 0, 1, 2, ... again; that is the order asked for."""
    world = World("torch", {"detect_duplicate_batches": "warn"}, 0)
    world.add_node("c10d", "collectives", {"ranks": 1})
    world.add_node("r0", "rank", {"incarnation": 0})
    context = Context(world)
    context.node, context.state = "r0", world.nodes["r0"]
    for step in (1, 2, 3):
        indices = [0, 1, 2, 3] if step != 2 else [4, 5, 6, 7]
        world.nodes["r0"]["batch"] = {"step": step, "indices": indices, "batches": 1, "indices_dropped": 0}
        duplicates.check(world.nodes["r0"], indices, context)
    assert world.queue == []  # no warning sent
    # the control: a shuffled order whose first two batches come again, one after the other
    first_two = ([3, 0, 2, 1], [7, 4, 6, 5])
    world.nodes["r0"].pop("batch_first")
    for step, indices in enumerate([*first_two, *first_two], start=1):
        world.nodes["r0"]["batch"] = {"step": step, "indices": indices, "batches": 1, "indices_dropped": 0}
        duplicates.check(world.nodes["r0"], indices, context)
    assert [event.payload["step"] for event in world.queue] == [3]


def test_a_first_batch_read_for_its_size_and_then_trained_on_is_no_repeat() -> None:
    # pytorch/examples' DDP tutorial reads next(iter(loader)) each epoch for the batch size: the same
    # indices twice in one optimizer step, one of them never trained on (it warned "repeats its first
    # batch (step 1)" before)
    script = ROOT / "tests" / "torch_scripts" / "peek_first_batch.py"
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={script}", "nproc=2", "rank_output=quiet"])
    report, _world = run_report(scenario, config, 0, launch=launch_naming([str(script)]))
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["optimizer_steps"] > 0 and report["summary"]["warnings"] == []
