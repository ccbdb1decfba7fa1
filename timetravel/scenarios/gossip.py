"""gossip: rumors spread through ``nodes`` peers by seeded random fan-out.

A load generator injects ``rumors`` rumors, one every ``interval``, each at a peer drawn by a
choice. A peer that hears a rumor for the first time forwards it to ``fanout`` peers drawn by
choices. With 1024 nodes and 1000 rumors this is millions of events: the kernel's and the
snapshot store's load test. Each peer remembers what it has seen in a numpy bool array, so its
state has pages for the copy-on-write store to share. ``coverage_min`` turns incomplete
spreading into a failure checked when the run ends.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from timetravel.sim import Context, Event, Param, Scenario, ScenarioView, World
from timetravel.sim.world import NODES_MAX

MESSAGE_BYTES = 256


def peer_name(index: int) -> str:
    return f"n{index}"


def build(config: dict[str, Any], seed: int) -> World:
    world = World("gossip", config, seed)
    world.fabric.update(latency_ns=config["latency"], jitter_ns=config["jitter"])
    for index in range(config["nodes"]):
        world.add_node(
            peer_name(index), "peer", {"seen": np.zeros(config["rumors"], dtype=np.bool_), "received": 0}
        )
    world.add_node("load", "load", {"injected": 0})
    world.schedule(0, "load", "tick", 0)
    return world


def load_tick(state: dict[str, Any], event: Event, ctx: Context) -> None:
    rumor = event.payload
    target = peer_name(ctx.choose("gossip.target", ctx.config["nodes"]))
    ctx.send(target, "rumor", [rumor, 0], MESSAGE_BYTES)
    state["injected"] = rumor + 1
    if rumor + 1 < ctx.config["rumors"]:
        ctx.timer(ctx.config["interval"], "tick", rumor + 1)


def peer_rumor(state: dict[str, Any], event: Event, ctx: Context) -> None:
    rumor, hops = event.payload
    state["received"] += 1
    seen = state["seen"]
    if seen[rumor]:
        return
    seen[rumor] = True
    nodes = ctx.config["nodes"]
    forward = [rumor, hops + 1]
    for _ in range(ctx.config["fanout"]):
        peer = peer_name(ctx.choose("gossip.peer", nodes))
        if peer != ctx.node:
            ctx.send(peer, "rumor", forward, MESSAGE_BYTES)


def coverage(world: World) -> np.ndarray:
    """Fraction of peers that heard each rumor."""
    counts = np.zeros(world.config["rumors"], dtype=np.int64)
    for name, state in world.nodes.items():
        if world.roles[name] == "peer":
            counts += state["seen"]
    return counts / world.config["nodes"]


def on_end(world: World, ctx: Context) -> None:
    required = world.config["coverage_min"]
    if not required:
        return
    per_rumor = coverage(world)
    worst = int(np.argmin(per_rumor))
    if per_rumor[worst] < required:
        message = f"rumor {worst} reached {per_rumor[worst]:.1%} of peers, below coverage_min {required:.1%}"
        ctx.fail("assertion", message, site="gossip.coverage", node="load")


def summarize(world: World) -> dict[str, Any]:
    per_rumor = coverage(world)
    received = sum(state.get("received", 0) for state in world.nodes.values())
    return {
        "messages": received,
        "coverage_min": float(per_rumor.min()) if per_rumor.size else 0.0,
        "coverage_mean": float(per_rumor.mean()) if per_rumor.size else 0.0,
    }


SCENARIO = Scenario(
    name="gossip",
    summary="rumors spread by seeded random fan-out; a load generator that reaches millions of events",
    params=(
        Param("nodes", "int", 64, "number of peers", minimum=2, maximum=NODES_MAX - 1),
        Param("fanout", "int", 3, "peers a rumor is forwarded to on first hearing", minimum=1),
        Param("rumors", "int", 100, "rumors injected by the load generator", minimum=1),
        Param("interval", "time", 1_000_000, "time between two injected rumors"),
        Param("latency", "time", 5_000, "one-way latency of every message"),
        Param("jitter", "time", 2_000, "extra latency per message, drawn in [0, jitter]"),
        Param(
            "coverage_min",
            "float",
            0.0,
            "fail when a rumor reaches a smaller fraction of peers (0: off)",
            minimum=0.0,
        ),
    ),
    build=build,
    handlers={"peer": {"rumor": peer_rumor}, "load": {"tick": load_tick}},
    on_end=on_end,
    summarize=summarize,
    view=ScenarioView(rank_role="peer", step_key="received"),
)
