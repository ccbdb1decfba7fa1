"""The divergence detector's verdict when replicas split: a majority names a minority; a tie names
every side (docs/torch.md, Detectors)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)

from timetravel.scenarios import get_scenario
from timetravel.sim.context import Context
from timetravel.sim.runner import run_report
from timetravel.sim.world import World
from timetravel.torch.world import replicas
from timetravel.torch.world.host import RankHost
from timetravel.torch.world.specs import launch_naming

ROOT = Path(__file__).resolve().parent.parent
DDP_MLP = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"


def run_ddp_mlp(nproc: int, steps: int, faults: list[dict]) -> tuple[dict, World]:
    launch = launch_naming([str(DDP_MLP)])
    scenario = get_scenario("torch")
    settings = [f"script={DDP_MLP}", f"nproc={nproc}", "rank_output=quiet", f"args=--steps {steps}"]
    config = scenario.resolve_config([*settings, f"faults={json.dumps(faults)}"])
    return run_report(scenario, config, 0, launch=launch)


def verdict(digests_by_rank: list[str]) -> dict:
    """The failure replicas.check_step records for one parameter whose digest per rank is given."""
    world = World("torch", {}, 0)
    reports = {
        str(rank): [["fc.weight", [2], "float32", digest]] for rank, digest in enumerate(digests_by_rank)
    }
    replicas.check_step("3", reports, Context(world))
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
    report, world = run_ddp_mlp(2, 8, faults)
    failure = world.failures[0]
    assert failure["kind"] == "divergence", report["failure"]
    assert failure["split"] == [["r0"], ["r1"]] and failure["node"] == "r1"
    assert "received different results with no majority: {r0} against {r1}" in failure["message"]


def test_a_low_bit_flip_in_one_result_is_reported_at_the_collective_in_the_step_it_happened() -> None:
    """Bit 1 of element 400 of r2's gradient all_reduce in step 3: the parameters after the step
    still agree (the update rounds it away; only the momentum keeps it), so comparing parameters
    alone reported it after step 11, as another tensor. The members' received results differ at once."""
    faults = [
        {
            "kind": "corrupt",
            "target": "r2",
            "t_start": 1_000_000,
            "params": {"side": "result", "numel_min": 2, "element": 400, "bit": 1},
        }
    ]
    report, world = run_ddp_mlp(4, 12, faults)
    failure = world.failures[0]
    assert failure["kind"] == "divergence", report["failure"]
    assert (failure["node"], failure["minority"], failure["step"]) == ("r2", ["r2"], 3)
    assert (failure["collective"], failure["output"], failure["element"]) == ("0#10", 0, 400)
    assert failure["message"] == (
        "in optimizer step 3, r2 received another result from all_reduce 0#10 (group 0, seq 10) than the "
        "other 3 members: output tensor 0 (float32[577]), first at element 400"
    )
    assert world.fabric["fault_hits"] == {"f1": 1}


def test_received_results_are_compared_only_where_every_member_gets_the_same() -> None:
    """A reduce_scatter hands each member its own part: different bits there are no divergence."""
    world = World("torch", {}, 0)
    state = {"steps": {}, "steps_checked": 2}
    entries = [{"rank": rank, "op": "reduce_scatter"} for rank in range(2)]
    parts = [[np.zeros(2, np.float32)], [np.ones(2, np.float32)]]
    assert not replicas.check_received(state, entries, parts, [["a"], ["b"]], "0#4", Context(world))
    entries = [{"rank": rank, "op": "all_gather"} for rank in range(3)]
    gathered = [[np.zeros(2, np.float32)], [np.zeros(2, np.float32)], [np.array([0, 2], np.float32)]]
    context = Context(world)
    context.processes = RankHost()  # computes what the World reads from bytes (journal.py keeps it)
    assert replicas.check_received(state, entries, gathered, [["a"], ["a"], ["b"]], "0#4", context)
    failure = world.failures[0]
    assert (failure["node"], failure["step"], failure["element"]) == ("r2", 3, 1)
    assert (
        "r2 received another result from all_gather 0#4 (group 0, seq 4) than the other 2"
        in failure["message"]
    )
