"""Scenarios that misbehave on purpose, for the farm's reliability tests.

Workers load them with ``--scenario farm_scenarios:NAME`` (tests/ is on sys.path under pytest,
and worker processes inherit it).

* ``KILLER``: the seeds listed in ``kill_seeds`` SIGKILL their own worker process in the middle of
  the run, the first time only (a marker file in ``marker_dir`` remembers), then run normally:
  a worker killed mid-seed, deterministically.
* ``STUCK``: the seeds listed in ``stuck_seeds`` loop forever inside a handler, where the
  cooperative timeout cannot see them: only the watchdog's kill stops them.
* ``SWARMY``: a ``faults`` key that accepts ``swarm``; with it, each seed draws a schedule of fault
  kinds at t=0 (``choose_world``), and a seed fails (``oracle:swarmy.crash_lost_data``) once both a
  ``crash`` and a ``drop`` have started: the kind of co-occurrence ``findings`` reports.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from timetravel.sim import Context, Event, Param, Scenario, World, choose_world

TICKS = 20
TICK_NS = 1_000
SWARM_KINDS = ("crash", "drop", "delay")


def _ticker_build(name: str) -> Any:
    def build(config: dict[str, Any], seed: int) -> World:
        world = World(name, config, seed)
        world.add_node("clock", "clock", {"ticks": 0})
        world.schedule(0, "clock", "tick")
        return world

    return build


def _tick_again(state: dict[str, Any], ctx: Context) -> None:
    """The clock's next tick, a tick later, until it has ticked TICKS times."""
    if state["ticks"] < TICKS:
        ctx.timer(TICK_NS, "tick")


def _kill_tick(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["ticks"] += 1
    world = ctx.world
    if state["ticks"] == TICKS // 2 and world.seed in ctx.config["kill_seeds"]:
        marker = Path(ctx.config["marker_dir"]) / f"killed-{world.seed}"
        if ctx.config["kill_always"] or not marker.exists():
            marker.touch()
            os.kill(os.getpid(), signal.SIGKILL)
    if state["ticks"] < TICKS:
        ctx.timer(TICK_NS + ctx.choose("tick.jitter", 100), "tick")


KILLER = Scenario(
    name="killer",
    summary="kills its own worker mid-seed, once per listed seed",
    params=(
        Param("kill_seeds", "json", [], "seeds whose first run kills the worker process"),
        Param("marker_dir", "str", "", "where the first-run markers go"),
        Param("kill_always", "bool", False, "kill on every run, not only the first"),
    ),
    build=_ticker_build("killer"),
    handlers={"clock": {"tick": _kill_tick}},
    determinism="off",  # it kills its process and writes a marker file, on purpose
)


def _stuck_tick(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["ticks"] += 1
    if ctx.world.seed in ctx.config["stuck_seeds"]:
        while True:  # a handler that never returns: only a kill stops it
            pass
    _tick_again(state, ctx)


STUCK = Scenario(
    name="stuck",
    summary="loops forever inside a handler for the listed seeds",
    params=(Param("stuck_seeds", "json", [], "seeds whose handler never returns"),),
    build=_ticker_build("stuck"),
    handlers={"clock": {"tick": _stuck_tick}},
    determinism="off",
)


def _swarmy_build(config: dict[str, Any], seed: int) -> World:
    world = _ticker_build("swarmy")(config, seed)
    if config["faults"] == "swarm":
        for index, kind in enumerate(SWARM_KINDS):
            if choose_world(world, f"swarm.{kind}", 2):
                start = choose_world(world, "swarm.start", TICKS) * TICK_NS
                world.faults.append({"id": f"f{index + 1}", "kind": kind, "t_start_ns": start})
    return world


def _swarmy_tick(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["ticks"] += 1
    started = {
        fault["kind"]: fault["t_start_ns"] for fault in ctx.world.faults if fault["t_start_ns"] <= ctx.now
    }
    if "crash" in started and "drop" in started:
        ctx.fail("oracle", "a crash and a drop lost data", site="swarmy.crash_lost_data")
        return
    _tick_again(state, ctx)


SWARMY = Scenario(
    name="swarmy",
    summary="fails when a swarm schedule holds a crash and a drop",
    params=(Param("faults", "str", "none", "fault schedule", choices=("none", "swarm")),),
    build=_swarmy_build,
    handlers={"clock": {"tick": _swarmy_tick}},
)


def _record_killer_tick(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["ticks"] += 1
    if state["ticks"] == 3:
        marker = Path(ctx.config["marker_dir"]) / f"ran-{ctx.world.seed}"
        if marker.exists():  # every run after the sweep's own: the recording runs
            os.kill(os.getpid(), signal.SIGKILL)
        marker.touch()
    if state["ticks"] == 5:
        ctx.fail("assertion", "every seed fails", site="record_killer.always")
        return
    ctx.timer(TICK_NS, "tick")


RECORD_KILLER = Scenario(
    name="record_killer",
    summary="every seed fails; every run after the first kills its worker (so recording it crashes)",
    params=(Param("marker_dir", "str", "", "where the first-run markers go"),),
    build=_ticker_build("record_killer"),
    handlers={"clock": {"tick": _record_killer_tick}},
    determinism="off",
)
