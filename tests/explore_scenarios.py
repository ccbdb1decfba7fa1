"""coin: a scenario whose outcome is one choice, so a branch's, fan-out's or rerun's outcome can be
computed from the choice streams alone, independently of the engine under test.

A ``clock`` node ticks every TICK_NS until END_NS (recording a ``ticks`` metric) — the events
that give the run its snapshots. At FLIP_NS the ``coin`` node draws one choice at site
``coin.flip`` with bound ``config["sides"]`` and keeps it; the run fails at its end (``on_end``,
signature ``assertion:coin.end``) when the face is odd. So a future forked before FLIP_NS fails
exactly when its own draw is odd, and every future forked after it fails as the recorded run did.

Variants for rerun on "changed code" (same name, another handler): TICK_TWICE counts two ticks
per tick event (the state differs, the event stream does not); LATE_FLIP flips 1 ms later (the
event stream differs).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from timetravel.sim import Context, Event, Param, Scenario, World
from timetravel.sim.choices import draw, stream_base

TICK_NS = 100_000
FLIP_NS = 10_000_000
END_NS = 20_000_000
COIN = "coin"
CLOCK = "clock"
FLIP_SITE = "coin.flip"


def build(config: dict[str, Any], seed: int) -> World:
    world = World("coin", config, seed)
    world.add_node(CLOCK, "clock", {"ticks": 0})
    world.add_node(COIN, "coin", {"face": None})
    world.schedule(0, CLOCK, "tick")
    world.schedule(config["flip_at"], COIN, "flip")
    return world


def tick(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["ticks"] += 1
    ctx.metric("ticks", 1)
    if ctx.now + TICK_NS <= END_NS:
        ctx.timer(TICK_NS, "tick")


def flip(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["face"] = ctx.choose(FLIP_SITE, ctx.config["sides"])
    ctx.log(f"face {state['face']}")


def on_end(world: World, ctx: Context) -> None:
    face = world.nodes[COIN]["face"]
    if face is not None and face % 2 == 1:
        ctx.fail("assertion", f"the coin shows {face}", site="coin.end", node=COIN)


SCENARIO = Scenario(
    name="coin",
    summary="one coin flip decides the outcome (the explore engine's test bed)",
    params=(
        Param("sides", "int", 2, "faces of the coin (odd faces fail)", minimum=1),
        Param("flip_at", "time", FLIP_NS, "when the coin is flipped"),
        Param("strict", "bool", False, "a branchable key nobody reads", branchable=True),
    ),
    build=build,
    handlers={"clock": {"tick": tick}, "coin": {"flip": flip}},
    on_end=on_end,
)


def face(seed: int, branch_key: int, sides: int = 2) -> int:
    """The face the coin shows for (seed, branch key): straight from the choice stream."""
    return draw(stream_base(seed, branch_key, COIN, FLIP_SITE), 0, sides)


def _tick_twice(state: dict[str, Any], event: Event, ctx: Context) -> None:
    tick(state, event, ctx)
    state["ticks"] += 1


TICK_TWICE = dataclasses.replace(SCENARIO, handlers={"clock": {"tick": _tick_twice}, "coin": {"flip": flip}})


def _late_build(config: dict[str, Any], seed: int) -> World:
    return build({**config, "flip_at": config["flip_at"] + 1_000_000}, seed)


LATE_FLIP = dataclasses.replace(SCENARIO, build=_late_build)
