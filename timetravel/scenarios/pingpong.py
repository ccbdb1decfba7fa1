"""pingpong: two nodes pass a message back and forth ``rounds`` times.

The smallest world that exercises the kernel: messages over the kernel's fixed-latency network
with a jitter choice per message, a timer-free protocol, and an optional latency assertion
(``rtt_max``) that fails on the seeds whose jitter adds up past it: the tutorial's first bug.
"""

from __future__ import annotations

from typing import Any

from timetravel.sim import Context, Event, Param, Scenario, ScenarioView, World

MESSAGE_BYTES = 64


def build(config: dict[str, Any], seed: int) -> World:
    world = World("pingpong", config, seed)
    world.fabric.update(latency_ns=config["latency"], jitter_ns=config["jitter"])
    world.add_node("ping", "ping", {"round": 0, "sent_ns": 0, "rtt_max_ns": 0})
    world.add_node("pong", "pong", {"replies": 0})
    world.schedule(0, "ping", "start")
    return world


def ping_start(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["sent_ns"] = ctx.now
    ctx.send("pong", "ping", 0, MESSAGE_BYTES)


def ping_pong(state: dict[str, Any], event: Event, ctx: Context) -> None:
    rtt_ns = ctx.now - state["sent_ns"]
    if rtt_ns > state["rtt_max_ns"]:
        state["rtt_max_ns"] = rtt_ns
    limit_ns = ctx.config["rtt_max"]
    if limit_ns and rtt_ns > limit_ns:
        ctx.fail(
            "assertion",
            f"round {event.payload} took {rtt_ns} ns, over rtt_max {limit_ns} ns",
            site="pingpong.rtt_max",
        )
        return
    state["round"] = event.payload + 1
    if state["round"] < ctx.config["rounds"]:
        state["sent_ns"] = ctx.now
        ctx.send("pong", "ping", state["round"], MESSAGE_BYTES)


def pong_ping(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["replies"] += 1
    ctx.send("ping", "pong", event.payload, MESSAGE_BYTES)


def summarize(world: World) -> dict[str, Any]:
    ping = world.nodes["ping"]
    return {"rounds": ping["round"], "rtt_max_ns": ping["rtt_max_ns"]}


SCENARIO = Scenario(
    name="pingpong",
    summary="two nodes pass a message back and forth; rtt_max turns jitter into a failure",
    params=(
        Param("rounds", "int", 1000, "round trips to make", minimum=1),
        Param("latency", "time", 1_000, "one-way latency of every message"),
        Param("jitter", "time", 200, "extra latency per message, drawn in [0, jitter] (site net.jitter)"),
        Param("rtt_max", "time", 0, "fail when a round trip takes longer (0: never)"),
    ),
    build=build,
    handlers={"ping": {"start": ping_start, "pong": ping_pong}, "pong": {"ping": pong_ping}},
    summarize=summarize,
    view=ScenarioView(step_key="round"),
)
