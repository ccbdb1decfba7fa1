"""A replicated register with a read-your-writes bug: the scenario of docs/writing-a-scenario.md.

A client writes 1, 2, 3, ... to a primary; the primary replicates each value to a backup. After a
write is acknowledged the client reads from the backup and expects to see its own write. With
``ack=early`` the primary acknowledges before the backup has the value, so whenever the network
delivers the client's read before the replication, the read is stale: a bug that only some seeds
show. ``ack=replicated`` is the fix: acknowledge once the backup confirms.
"""

from __future__ import annotations

from typing import Any

from timetravel.sim import Context, Event, Param, Scenario, World

MESSAGE_BYTES = 64


def build(config: dict[str, Any], seed: int) -> World:
    world = World("replicated_register", config, seed)
    world.fabric.update(latency_ns=config["latency"], jitter_ns=config["jitter"])
    world.add_node("client", "client", {"written": 0})
    world.add_node("primary", "primary", {"value": 0, "pending": {}})
    world.add_node("backup", "backup", {"value": 0})
    world.schedule(0, "client", "next")
    return world


def client_next(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["written"] += 1
    ctx.send("primary", "write", state["written"], MESSAGE_BYTES)


def client_ack(state: dict[str, Any], event: Event, ctx: Context) -> None:
    ctx.send("backup", "read", None, MESSAGE_BYTES)


def client_value(state: dict[str, Any], event: Event, ctx: Context) -> None:
    if event.payload < state["written"]:
        ctx.fail(
            "assertion",
            f"read {event.payload} after writing {state['written']}",
            site="register.read_your_writes",
        )
        return
    if state["written"] < ctx.config["writes"]:
        ctx.timer(ctx.config["think"], "next")


def primary_write(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["value"] = event.payload
    ctx.send("backup", "replicate", event.payload, MESSAGE_BYTES)
    if ctx.config["ack"] == "early":
        ctx.send("client", "ack", event.payload, MESSAGE_BYTES)


def primary_replicated(state: dict[str, Any], event: Event, ctx: Context) -> None:
    if ctx.config["ack"] == "replicated":
        ctx.send("client", "ack", event.payload, MESSAGE_BYTES)


def backup_replicate(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["value"] = event.payload
    ctx.send("primary", "replicated", event.payload, MESSAGE_BYTES)


def backup_read(state: dict[str, Any], event: Event, ctx: Context) -> None:
    ctx.send("client", "value", state["value"], MESSAGE_BYTES)


SCENARIO = Scenario(
    name="replicated_register",
    summary="primary-backup register; ack=early breaks read-your-writes on some seeds",
    params=(
        Param("writes", "int", 20, "values the client writes", minimum=1),
        Param("ack", "str", "early", "when the primary acknowledges", choices=("early", "replicated")),
        Param("latency", "time", 5_000, "one-way network latency"),
        Param("jitter", "time", 12_000, "extra latency per message, drawn in [0, jitter]"),
        Param("think", "time", 100_000, "client pause between writes"),
    ),
    build=build,
    handlers={
        "client": {"next": client_next, "ack": client_ack, "value": client_value},
        "primary": {"write": primary_write, "replicated": primary_replicated},
        "backup": {"replicate": backup_replicate, "read": backup_read},
    },
)
