"""Choices: counter-based, keyed by (seed, branch key, node, site), overridable, 0 is canonical."""

from __future__ import annotations

from typing import Any

import pytest
from one_node import run_one_node

from timetravel.scenarios import get_scenario
from timetravel.sim import Context, Event, Scenario, Simulation, World, choose_world
from timetravel.sim.choices import CHOICE_COUNTERS_KEY


def draws_world(seed: int, branch_key: int = 0) -> tuple[Scenario, World]:
    def draw(state: dict[str, Any], event: Event, ctx: Context) -> None:
        state["values"] = [ctx.choose("site.a", 1000) for _ in range(5)] + [ctx.choose("site.b", 2)]

    def build(config: dict[str, Any], seed: int) -> World:
        world = World("draws", config, seed, branch_key=branch_key)
        world.add_node("n1", "node", {"values": []})
        world.add_node("n2", "node", {"values": []})
        world.schedule(0, "n1", "draw")
        world.schedule(0, "n2", "draw")
        return world

    return Scenario("draws", "", (), build, {"node": {"draw": draw}}), build({}, seed)


def run_draws(seed: int, branch_key: int = 0, **options: Any) -> World:
    scenario, world = draws_world(seed, branch_key)
    Simulation(scenario, world, **options).run()
    return world


def test_same_inputs_give_the_same_choices_and_counters_live_in_node_state() -> None:
    first, second = run_draws(4), run_draws(4)
    assert first.nodes["n1"]["values"] == second.nodes["n1"]["values"]
    assert first.nodes["n1"][CHOICE_COUNTERS_KEY] == {"site.a": 5, "site.b": 1}
    assert first.nodes["n1"]["values"] != first.nodes["n2"]["values"]


def test_seed_and_branch_key_each_change_the_stream() -> None:
    base = run_draws(4).nodes["n1"]["values"]
    assert run_draws(5).nodes["n1"]["values"] != base
    assert run_draws(4, branch_key=1).nodes["n1"]["values"] != base


def test_overrides_pin_single_choices_and_the_log_records_every_draw() -> None:
    log: list[list[Any]] = []
    world = run_draws(4, overrides={("n1", "site.a", 2): 0, ("n2", "site.b", 0): 1}, choice_log=log)
    free = run_draws(4)
    values = world.nodes["n1"]["values"]
    assert values[2] == 0
    assert values[:2] == free.nodes["n1"]["values"][:2] and values[3:] == free.nodes["n1"]["values"][3:]
    assert world.nodes["n2"]["values"][5] == 1
    assert len(log) == 12 and log[2] == ["n1", "site.a", 2, 0]


def test_all_zero_choices_are_the_canonical_run() -> None:
    scenario = get_scenario("pingpong")
    config = scenario.resolve_config({"rounds": 20, "jitter": 5_000})
    zeros = {("ping", "net.jitter", index): 0 for index in range(20)}
    zeros.update({("pong", "net.jitter", index): 0 for index in range(20)})
    world = scenario.build(config, 99)
    result = Simulation(scenario, world, overrides=zeros).run()
    assert result.t_end_ns == 20 * 2 * config["latency"]


def test_chance_is_never_true_at_zero_and_always_at_one() -> None:
    def roll(state: dict[str, Any], event: Event, ctx: Context) -> None:
        state["never"] = any(ctx.chance("p0", 0.0) for _ in range(200))
        state["always"] = all(ctx.chance("p1", 1.0) for _ in range(200))
        state["half"] = sum(ctx.chance("p5", 0.5) for _ in range(2000))
        state["order"] = ctx.order("perm", ["a", "b", "c", "d"])

    world, _result = run_one_node("c", roll, seed=1, event="roll")
    state = world.nodes["n"]
    assert state["never"] is False and state["always"] is True
    assert 850 < state["half"] < 1150
    assert sorted(state["order"]) == ["a", "b", "c", "d"]


def test_world_level_choices_and_bounds() -> None:
    world = World("w", {}, 3)
    first = [choose_world(world, "faults", 10) for _ in range(4)]
    again = World("w", {}, 3)
    assert [choose_world(again, "faults", 10) for _ in range(4)] == first
    assert world.choices == {"faults": 4}
    with pytest.raises(ValueError):
        choose_world(world, "faults", 0)
