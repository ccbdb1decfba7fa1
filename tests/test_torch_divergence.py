"""The divergence detector's verdict when replicas split: a majority names a minority; a tie names
every side (docs/torch.md, Detectors)."""

from __future__ import annotations

import json
from pathlib import Path

import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)

from timetravel.scenarios import get_scenario
from timetravel.sim.context import Context
from timetravel.sim.runner import run_report
from timetravel.sim.world import World
from timetravel.torch.world import c10d
from timetravel.torch.world.specs import launch_naming

ROOT = Path(__file__).resolve().parent.parent
DDP_MLP = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"


def verdict(digests_by_rank: list[str]) -> dict:
    """The failure _check_replicas records for one parameter whose digest per rank is given."""
    world = World("torch", {}, 0)
    reports = {
        str(rank): [["fc.weight", [2], "float32", digest]] for rank, digest in enumerate(digests_by_rank)
    }
    c10d._check_replicas("3", reports, Context(world))
    assert len(world.failures) == 1
    return world.failures[0]


def test_a_strict_majority_names_the_minority() -> None:
    failure = verdict(["a", "a", "b", "a"])
    assert failure["node"] == "r2" and failure["minority"] == ["r2"]
    assert failure["split"] == [["r0", "r1", "r3"], ["r2"]]
    assert "differs on r2 from the other 3 replicas" in failure["message"]


def test_two_ranks_that_disagree_are_a_split_with_no_majority() -> None:
    failure = verdict(["a", "b"])
    assert failure["minority"] == [] and failure["split"] == [["r0"], ["r1"]]
    assert failure["node"] == "r1"  # the convention: the lowest rank that disagrees with r0
    assert "no majority: {r0} against {r1}" in failure["message"]


def test_a_two_against_two_tie_names_both_sides_whatever_the_digests_sort_as() -> None:
    for digests in (["a", "b", "b", "a"], ["b", "a", "a", "b"]):
        failure = verdict(digests)
        assert failure["split"] == [["r0", "r3"], ["r1", "r2"]] and failure["node"] == "r1"
        assert failure["minority"] == []


def test_a_flipped_bit_in_one_of_two_replicas_is_reported_as_a_split() -> None:
    faults = [
        {
            "kind": "corrupt",
            "target": "r1",
            "t_start": 1_500_000,
            "params": {"side": "result", "numel_min": 2},
        }
    ]
    launch = launch_naming([str(DDP_MLP)])
    scenario = get_scenario("torch")
    settings = [
        f"script={DDP_MLP}",
        "nproc=2",
        "rank_output=quiet",
        "args=--steps 8",
        f"faults={json.dumps(faults)}",
    ]
    report, world = run_report(scenario, scenario.resolve_config(settings), 0, launch=launch)
    failure = world.failures[0]
    assert failure["kind"] == "divergence", report["failure"]
    assert failure["split"] == [["r0"], ["r1"]] and failure["node"] == "r1"
    assert "with no majority: {r0} against {r1}" in failure["message"]
