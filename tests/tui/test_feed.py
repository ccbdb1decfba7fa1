"""feed: a World's ranks, marks and curves as widget data; charts: columns and glyphs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from timetravel.scenarios import get_scenario
from timetravel.sim import ScenarioView, World, make_failure
from timetravel.sim.runner import run_report
from timetravel.sim.scenario import FAULT_VIEW_STATES
from timetravel.tui.charts import column_values, hold_gaps, nice_step, plot_rows, sparkline_glyphs
from timetravel.tui.feed import rank_cells_from_world, rank_names, timeline_from_world
from timetravel.tui.model import RANK_STATES

MS = 1_000_000
TRAINING_VIEW = ScenarioView(
    rank_role="rank",
    step_key="step",
    collective_seq_key="collective_seq",
    progress_key="last_progress_ns",
    weight_key="weights",
    waiting_key="waiting_on",
    fault_states={"slow": "slow", "partition": "partitioned"},
)
"""What training_like_world's scenario declares (the keys its rank nodes hold)."""
TORCH_VIEW = ScenarioView(
    rank_role="rank", step_key="state_step", status_key="status", collectives_role="collectives"
)
"""What the torch scenario declares (issue 29: its rank nodes keep ``state_step`` and ``status``,
its ``c10d`` node of role ``collectives`` each rank's last collective)."""


def training_like_world() -> World:
    """Eight ranks at step 40 with weights; each rank shows one of the conditions the grid names."""
    world = World("fake", {}, 0)
    world.add_node("coordinator", "coordinator", {})
    weights = np.linspace(-1, 1, 16, dtype=np.float32)
    for index in range(8):
        world.add_node(
            f"rank{index}",
            "rank",
            {"step": 40, "collective_seq": 160, "last_progress_ns": 400 * MS, "weights": weights.copy()},
        )
    world.nodes["rank1"]["weights"][3] = np.nan
    world.nodes["rank2"]["weights"][0] += 1e-3
    world.nodes["rank3"]["step"] = 38
    world.nodes["rank6"]["waiting_on"] = "rank3"
    world.down["rank4"] = 390 * MS
    world.faults += [
        {"id": "f1", "kind": "slow", "target": "rank5", "t_start": 100 * MS, "t_end": 900 * MS},
        {
            "id": "f2",
            "kind": "partition",
            "target": ["rank6", "rank7"],
            "t_start": 300 * MS,
            "t_end": 350 * MS,
        },
        {"id": "f3", "kind": "partition", "target": ["rank7"], "t_start": 380 * MS, "t_end": 600 * MS},
    ]
    world.t_ns = 410 * MS
    world.metrics["loss"] = [[10 * MS, "rank0", 2.0], [20 * MS, "rank0", 1.5], [30 * MS, "rank1", math.nan]]
    world.failures.append(make_failure("nan", "rank1", 30 * MS, "loss is nan", "guard"))
    return world


def test_rank_states_follow_the_documented_rules() -> None:
    world = training_like_world()
    assert rank_names(world, TRAINING_VIEW) == [f"rank{index}" for index in range(8)]
    cells = {cell.name: cell for cell in rank_cells_from_world(world, TRAINING_VIEW)}
    assert {name: cell.state for name, cell in cells.items()} == {
        "rank0": "healthy",
        "rank1": "nan",  # a NaN in its weights (and the failure names it)
        "rank2": "diverged",  # its weights differ from the majority's
        "rank3": "healthy",  # behind, but healthy: the grid's "behind" mode shows it
        "rank4": "crashed",  # the world has it down
        "rank5": "slow",  # a slow fault is active at 410 ms
        "rank6": "healthy",  # its partition healed at 350 ms
        "rank7": "partitioned",
    }
    assert cells["rank3"].step == 38 and cells["rank6"].waiting_on == "rank3"
    assert cells["rank0"].collective_seq == 160 and cells["rank0"].last_progress_ns == 400 * MS


def test_only_what_the_scenario_declares_is_read() -> None:
    """The same world under a view that declares nothing: the ranks are the role most nodes have,
    and no step, weights, waiting or fault condition is guessed from key or kind names."""
    world = training_like_world()
    assert rank_names(world, ScenarioView()) == [f"rank{index}" for index in range(8)]
    cells = {cell.name: cell for cell in rank_cells_from_world(world, ScenarioView())}
    assert {name: cell.state for name, cell in cells.items()} == {
        **{f"rank{index}": "healthy" for index in range(8)},
        "rank1": "nan",  # the failure and the NaN in its state are the world's, not a key's
        "rank4": "crashed",  # the world has it down
    }
    assert {(cell.step, cell.collective_seq, cell.waiting_on) for cell in cells.values()} == {(0, 0, "")}
    assert timeline_from_world(world, ScenarioView(loss_metric="accuracy")).loss == ()


def test_a_fault_state_names_a_condition_the_rank_grid_has() -> None:
    assert set(FAULT_VIEW_STATES) <= set(RANK_STATES)
    with pytest.raises(ValueError, match="'straggling' is not one of slow, partitioned"):
        ScenarioView(fault_states={"slow": "straggling"})


def test_the_declared_role_stands_for_ranks() -> None:
    scenario = get_scenario("gossip")
    _report, world = run_report(scenario, scenario.resolve_config(["nodes=12", "rumors=5"]), 1)
    cells = rank_cells_from_world(world, scenario.view)
    assert [cell.name for cell in cells] == [f"n{index}" for index in range(12)]
    assert [cell.step for cell in cells] == [world.nodes[f"n{index}"]["received"] for index in range(12)]
    assert {cell.state for cell in cells} == {"healthy"}


def test_timeline_marks_faults_and_failures_and_carries_the_loss() -> None:
    world = training_like_world()
    data = timeline_from_world(
        world, TRAINING_VIEW, snapshots_ns=[0, 200 * MS], branch_marks=[(250 * MS, "b1")]
    )
    assert [(mark.t_ns, mark.kind, mark.label) for mark in data.marks] == [
        (0, "snapshot", ""),
        (30 * MS, "failure", "nan on rank1"),
        (100 * MS, "fault", "f1 slow rank5"),
        (200 * MS, "snapshot", ""),
        (250 * MS, "branch", "b1"),
        (300 * MS, "fault", "f2 partition rank6,rank7"),
        (380 * MS, "fault", "f3 partition rank7"),
    ]
    assert data.t_end_ns == 410 * MS
    assert data.loss[:2] == ((10 * MS, 2.0), (20 * MS, 1.5)) and math.isnan(data.loss[2][1])


def test_columns_average_but_never_hide_a_nan() -> None:
    points = [(0, 1.0), (5, 3.0), (10, 2.0), (15, math.nan), (30, 4.0)]
    values = column_values(points, 0, 39, 4)
    assert values[0] == 2.0 and math.isnan(values[1]) and values[2] is None and values[3] == 4.0
    assert column_values(points, 0, 39, 4, reduce="max")[0] == 3.0
    assert hold_gaps([None, 1.0, None, 2.0, None]) == [None, 1.0, 1.0, 2.0, None]
    assert sparkline_glyphs([0.0, None, 1.0, math.nan]) == "▁ █!"
    assert nice_step(13.7e6) == 20_000_000 and nice_step(1) == 1 and nice_step(4.2) == 5
    grid = plot_rows([[1.0, 2.0], [1.0, math.nan]], 3)
    assert grid == [[0, 3], [0, 0], [3, 0]]  # both at the bottom first; a at the top, b NaN (top) next


def test_dp_training_conventions_collective_seq_and_the_hang_flight_recorder() -> None:
    """dp_training keeps ``coll_seq`` and ``progress_ns``, and a hang failure carries a flight
    recorder naming whom each rank waits on (the rank grid shows it at the hang)."""
    world = World("fake", {}, 0)
    for index in range(3):
        world.add_node(f"r{index}", "rank", {"step": 7, "coll_seq": 6 + (index == 2), "progress_ns": 5 * MS})
    failure = make_failure("hang", "r0", 9 * MS, "no rank completed a step", "dp_training.hang")
    failure["flight_recorder"] = [
        {"rank": "r0", "waits_on": []},
        {"rank": "r1", "waits_on": ["r0"]},
        {"rank": "r2", "waits_on": ["r0", "r1"]},
    ]
    world.failures.append(failure)
    cells = rank_cells_from_world(world, get_scenario("dp_training").view)
    assert [(c.name, c.collective_seq, c.last_progress_ns, c.waiting_on) for c in cells] == [
        ("r0", 6, 5 * MS, ""),
        ("r1", 6, 5 * MS, "r0"),
        ("r2", 7, 5 * MS, "r0,r1"),
    ]


def torch_hang_world() -> World:
    """The shape of a torch recording at a hang (ddp_mlp.py, 3 ranks, r1's contribution dropped):
    the flight recorder rows give each rank's last entered collective, not whom it waits on."""
    world = World("torch", {}, 0)
    for index in range(3):
        world.add_node(f"r{index}", "rank", {"status": "waiting", "state_step": 2})
    world.add_node(
        "c10d", "collectives", {"last": {str(index): {"seq": 9 - (index == 1)} for index in range(3)}}
    )
    failure = make_failure("hang", "r1", 600_001 * MS, "r1 waited 600 s", "torch.collective.hang")
    failure["flight_recorder"] = [
        {"rank": "r0", "last_entered": "0#9", "last_completed": "0#8", "status": "waiting", "entries": []},
        {"rank": "r1", "last_entered": "0#8", "last_completed": "0#8", "status": "waiting", "entries": []},
        {"rank": "r2", "last_entered": "0#9", "last_completed": "0#8", "status": "waiting", "entries": []},
    ]
    world.failures.append(failure)
    return world


def test_a_torch_hang_names_the_rank_that_never_entered_the_collective() -> None:
    """Before: every rank waited on nobody at step 0, collective #0 (torch rows have no ``waits_on``,
    its ranks keep the optimizer step as ``state_step`` and their last collective in ``c10d``)."""
    cells = rank_cells_from_world(torch_hang_world(), TORCH_VIEW)
    assert [(c.name, c.step, c.collective_seq, c.waiting_on) for c in cells] == [
        ("r0", 2, 9, "r1"),
        ("r1", 2, 8, ""),
        ("r2", 2, 9, "r1"),
    ]

    # the rank the hang names is the one the others wait for: hung, the waiting ones stay healthy
    assert [c.state for c in cells] == ["healthy", "hung", "healthy"]
