"""Scale: a ring step at 1024 ranks (CI) or 10,000 (full) arrives exactly as the formula says.

Every rank sends 1 MiB to the next at t=0. Each flow has its own NVLink or NIC links, and each leaf
sends exactly one flow to the next leaf, so nothing contends: every arrival must be the latency of
its path plus one serialization (5731 ns over NVLink, 30572 ns within a leaf, 31472 ns through a
spine), which is the alpha-beta model a ring all-reduce is checked against.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from timetravel import fabric
from timetravel.sim import Context, Event, Param, Scenario, Simulation, World

MIB = 1 << 20
RANKS = {"ci": 1024, "full": 10_000}


def build(config: dict[str, Any], seed: int) -> World:
    world = World("scale", config, seed)
    ranks = [f"r{index}" for index in range(config["ranks"])]
    for name in ranks:
        world.add_node(name, "rank", {"arrived": -1})
        world.schedule(0, name, "start")
    fabric.install(world, ranks)
    return world


def start(state: dict[str, Any], event: Event, ctx: Context) -> None:
    ranks = ctx.config["ranks"]
    ctx.send(f"r{(int(ctx.node[1:]) + 1) % ranks}", "chunk", None, MIB)


def chunk(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["arrived"] = ctx.now


SCENARIO = Scenario(
    name="scale",
    summary="one ring step",
    params=(Param("ranks", "int", 1024, "ranks"), *fabric.fabric_params(network_jitter=0)),
    build=build,
    handlers=fabric.with_handlers({"rank": {"start": start, "chunk": chunk}}),
    transport=fabric.transport,
)


@pytest.mark.slow
def test_a_contention_free_ring_step_matches_the_formula_at_scale() -> None:
    ranks = RANKS[os.environ.get("TIMETRAVEL_SLOW", "ci")]
    world = SCENARIO.build(SCENARIO.resolve_config({"ranks": ranks}), 1)
    topology = fabric.Topology.from_data(world.fabric["topology"])
    assert Simulation(SCENARIO, world).run().events == 2 * ranks
    expected = {"nvlink": 3_400 + 2_331, "leaf": 9_600 + 20_972, "spine": 10_500 + 20_972}
    for receiver in range(ranks):
        sender = (receiver - 1) % ranks
        if topology.host_of(sender) == topology.host_of(receiver):
            edge = "nvlink"
        else:
            edge = "spine" if topology.crosses_spine(sender, receiver) else "leaf"
        assert world.nodes[f"r{receiver}"]["arrived"] == expected[edge], (sender, receiver, edge)
