"""Every built-in scenario's ``view`` names what its worlds hold: the TUI reads only those keys, so a
key renamed in a scenario without its declaration fails here, not as a blank column in the rank grid."""

from __future__ import annotations

import pytest

from timetravel import fabric
from timetravel.scenarios import get_scenario, needle, scenario_names
from timetravel.sim.runner import build_world
from timetravel.tui.feed import rank_names

SMALL = {"dp_training": ["ranks=4", "params=64"], "gossip": ["nodes=8"]}
"""Settings that keep a world small where the defaults are large."""
FAULT_MODELS = {"needle": needle.FAULT_KINDS}
"""A scenario's own fault kinds where it has its own model (every other one's are the fabric's)."""
RANK_KEYS = ("step_key", "collective_seq_key", "progress_key", "weight_key", "status_key", "waiting_key")


@pytest.mark.parametrize("name", [name for name in scenario_names() if name != "torch"])
def test_a_built_in_scenario_declares_keys_its_ranks_hold(name: str) -> None:
    scenario = get_scenario(name)
    view = scenario.view
    world = build_world(scenario, scenario.resolve_config(SMALL.get(name, [])), 0)
    ranks = rank_names(world, view)
    assert ranks, f"{name}: no node has the rank role {view.rank_role!r}"
    for field in RANK_KEYS:
        key = getattr(view, field)
        holders = [rank for rank in ranks if key in world.nodes[rank]]
        assert holders or not key, f"{name}: no rank's state holds its {field} {key!r}"
    assert set(view.fault_states) <= set(FAULT_MODELS.get(name, fabric.FAULT_KINDS))


def test_a_fabric_scenario_shows_the_fabric_s_slow_and_partitioned_kinds() -> None:
    assert fabric.VIEW_STATES == {"partition": "partitioned", "slow": "slow"}
    for name in ("dp_training", "rdma_fork"):
        assert get_scenario(name).view.fault_states == fabric.VIEW_STATES


def test_the_torch_scenario_declares_keys_its_ranks_hold_once_they_have_run() -> None:
    """A torch world's rank states fill in as its ranks run (their optimizer steps): look after a run."""
    from torch_launch import TEST_SCRIPTS, example_script

    from timetravel.sim.runner import run_report
    from timetravel.torch.world import faults

    scenario = get_scenario("torch")
    script = example_script("docs/examples/torch/ddp_mlp.py")
    config = scenario.resolve_config([f"script={script}", "nproc=2", "args=--steps 2", "rank_output=quiet"])
    report, world = run_report(scenario, config, 0, launch=TEST_SCRIPTS)
    assert report["outcome"] == "pass", report["failure"]
    view = scenario.view
    ranks = rank_names(world, view)
    assert ranks == ["r0", "r1"]
    for field in RANK_KEYS:
        key = getattr(view, field)
        assert not key or all(key in world.nodes[rank] for rank in ranks), f"torch: {field} {key!r}"
    assert world.roles[view.collectives_role] == "collectives"
    assert set(view.fault_states) <= set(faults.KINDS)
