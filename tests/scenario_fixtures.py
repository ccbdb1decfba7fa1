"""Scenarios made for the snapshot and recording tests (loaded with ``--scenario MODULE:ATTR``).

* ``FLOATS``: trainers with float32 weights of several pages and float64 optimizer moments,
  updated by small steps (what the XOR page codec is for), a loss metric per step (more than one
  metric chunk), a parameter server that rarely runs (copy-on-write sharing), a long-lived timer
  scheduled at t=0 (a queue generation that stays unchanged), and message payloads that carry
  arrays (read-only on restore).
* ``NONDETERMINISTIC``: reads a module-level counter, so a replay in the same process differs
  from the recording: a determinism bug on purpose.
* ``TRESPASSER``: a handler that writes into another node's state, breaking the contract that
  copy-on-write snapshots rely on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from timetravel.sim import Context, Event, Param, Scenario, World

WEIGHTS = 40_000
"""float32 weights: 160,000 bytes, three 64 KiB pages."""


def _floats_build(config: dict[str, Any], seed: int) -> World:
    world = World("floats", config, seed)
    for index in range(config["trainers"]):
        weights = np.linspace(-1.0, 1.0, WEIGHTS, dtype=np.float32) * (index + 1)
        world.add_node(
            f"t{index}",
            "trainer",
            {"weights": weights, "moment": np.zeros(WEIGHTS // 4, dtype=np.float64), "step": 0},
        )
        world.schedule(index * 10, f"t{index}", "step")
    world.add_node("ps", "ps", {"pushes": 0, "last": None})
    world.schedule(config["steps"] * 1_000_000, "ps", "audit")
    return world


def _trainer_step(state: dict[str, Any], event: Event, ctx: Context) -> None:
    step = state["step"] + 1
    state["step"] = step
    noise = ctx.choose("grad.noise", 1000) / 1000.0
    scale = np.float32(1e-4 * (1.0 + noise))
    weights = state["weights"]
    weights -= scale * np.sin(weights + np.float32(step))
    state["moment"][:1000] += 0.001
    ctx.metric("loss", float(np.abs(weights[:64]).mean()))
    if step % 10 == 0:
        ctx.send("ps", "push", weights[:16].copy(), 64)
    if step < ctx.config["steps"]:
        ctx.timer(1_000_000 + ctx.choose("jitter", 500), "step")


def _ps_push(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["pushes"] += 1
    state["last"] = event.payload.copy()


def _ps_audit(state: dict[str, Any], event: Event, ctx: Context) -> None:
    ctx.log(f"audit after {state['pushes']} pushes")


FLOATS = Scenario(
    name="floats",
    summary="trainers updating float weights by small steps (tests of the page codec)",
    params=(
        Param("trainers", "int", 4, "trainer nodes", minimum=1),
        Param("steps", "int", 300, "steps per trainer", minimum=1),
    ),
    build=_floats_build,
    handlers={"trainer": {"step": _trainer_step}, "ps": {"push": _ps_push, "audit": _ps_audit}},
)

_CALLS = [0]
"""State held in code: exactly what a handler must never do."""


def _nondeterministic_build(config: dict[str, Any], seed: int) -> World:
    world = World("nondeterministic", config, seed)
    for index in range(4):
        world.add_node(f"c{index}", "clock", {"ticks": 0})
        world.schedule(index, f"c{index}", "tick")
    return world


def _nondeterministic_tick(state: dict[str, Any], event: Event, ctx: Context) -> None:
    _CALLS[0] += 1
    state["ticks"] += 1
    if state["ticks"] < ctx.config["ticks"]:
        ctx.timer(1000 + _CALLS[0] % 7, "tick")


NONDETERMINISTIC = Scenario(
    name="nondeterministic",
    summary="timers that depend on a module-level counter (a determinism bug on purpose)",
    params=(Param("ticks", "int", 2000, "ticks per clock node", minimum=1),),
    build=_nondeterministic_build,
    handlers={"clock": {"tick": _nondeterministic_tick}},
)


def _trespasser_build(config: dict[str, Any], seed: int) -> World:
    world = World("trespasser", config, seed)
    world.add_node("a", "writer", {"n": 0})
    world.add_node("b", "victim", {"touched": 0})
    world.schedule(0, "a", "go")
    return world


def _trespasser_go(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["n"] += 1
    ctx.world.nodes["b"]["touched"] += 1
    if state["n"] < 300:
        ctx.timer(1000, "go")


TRESPASSER = Scenario(
    name="trespasser",
    summary="a handler that changes another node's state (breaks copy-on-write tracking)",
    params=(),
    build=_trespasser_build,
    handlers={"writer": {"go": _trespasser_go}, "victim": {}},
)
