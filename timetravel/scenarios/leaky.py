"""leaky: a hub fans work out to workers, and ``leak`` plants one determinism bug on purpose.

The demo and test subject of the determinism guard and of ``timetravel check-determinism``
(docs/determinism.md). Every round the hub sends ``work`` to each worker; a worker finishes after
a service time and answers ``done``; when every worker has answered, the hub starts the next round.

* ``leak=none``: deterministic.
* ``leak=set``: the hub sends in the iteration order of a ``set`` of worker names, which is hash
  order and changes with ``PYTHONHASHSEED``. No guard can see this; check-determinism finds the
  first event where two processes disagree.
* ``leak=clock``: a worker's service time is taken from ``time.time()``. Under the guard
  (``--determinism virtualize``, the default) that is the simulated clock and the run is
  deterministic; with ``--determinism off`` it is the machine's clock and it is not.
* ``leak=random``: the service time is ``random.random()``: a recorded choice under the guard, the
  process's global generator without it.
* ``leak=stamp``: a worker stores ``time.time()`` in its state and never acts on it. Without the
  guard the event streams agree and only the final states differ.

``leak_from_round`` keeps the first rounds clean (25 events a round with 8 workers), so a leak can be
planted deep into a run, past the first chain batch.
"""

from __future__ import annotations

import random
import time
from typing import Any

from timetravel.sim import Context, Event, Param, Scenario, ScenarioView, World

MESSAGE_BYTES = 64
LEAKS = ("none", "set", "clock", "random", "stamp")
SERVICE_NS = 500
SERVICE_EXTRA_NS_MAX = 1_000


def worker_names(workers: int) -> list[str]:
    return [f"w{index}" for index in range(workers)]


def worker_set(workers: int) -> set[str]:
    """The set the ``leak=set`` hub iterates (tests rebuild it to predict the hash order)."""
    return set(worker_names(workers))


def build(config: dict[str, Any], seed: int) -> World:
    world = World("leaky", config, seed)
    world.fabric.update(latency_ns=config["latency"], jitter_ns=0)
    world.add_node("hub", "hub", {"round": 0, "sent": 0, "answers": 0})
    for name in worker_names(config["workers"]):
        world.add_node(name, "worker", {"done": 0, "service_ns": 0, "stamp": 0.0})
    world.schedule(0, "hub", "start")
    return world


def leak_in_round(ctx: Context, round_number: int) -> str:
    """The configured leak, or "none" before ``leak_from_round``."""
    return str(ctx.config["leak"]) if round_number >= ctx.config["leak_from_round"] else "none"


def hub_start(state: dict[str, Any], event: Event, ctx: Context) -> None:
    workers = ctx.config["workers"]
    if leak_in_round(ctx, state["round"]) == "set":
        for name in worker_set(workers):  # the planted bug: hash order reaches the world
            ctx.send(name, "work", state["round"], MESSAGE_BYTES)
    else:
        for name in worker_names(workers):
            ctx.send(name, "work", state["round"], MESSAGE_BYTES)
    state["sent"] += workers


def hub_done(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["answers"] += 1
    if state["answers"] == ctx.config["workers"] * (state["round"] + 1):
        state["round"] += 1
        if state["round"] < ctx.config["rounds"]:
            ctx.timer(ctx.config["latency"], "start")


def service_extra_ns(leak: str) -> int:
    """Extra service time: 0, or a value read from the clock or the global random generator."""
    if leak == "clock":
        return int(time.time() * 1_000_000) % SERVICE_EXTRA_NS_MAX
    if leak == "random":
        return int(random.random() * SERVICE_EXTRA_NS_MAX)
    return 0


def worker_work(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["done"] += 1
    leak = leak_in_round(ctx, event.payload)
    state["service_ns"] = SERVICE_NS + service_extra_ns(leak)
    if leak == "stamp":
        state["stamp"] = time.time()
    ctx.timer(state["service_ns"], "finish", event.payload)


def worker_finish(state: dict[str, Any], event: Event, ctx: Context) -> None:
    ctx.send("hub", "done", event.payload, MESSAGE_BYTES)


def summarize(world: World) -> dict[str, Any]:
    return {"rounds": world.nodes["hub"]["round"], "answers": world.nodes["hub"]["answers"]}


SCENARIO = Scenario(
    name="leaky",
    summary="a hub fans work out to workers; leak=set|clock|random plants a determinism bug (the checker's demo)",
    params=(
        Param("workers", "int", 8, "workers the hub sends work to each round", minimum=1),
        Param("rounds", "int", 3, "rounds of work", minimum=1),
        Param("leak", "str", "none", "which nondeterminism to plant", choices=LEAKS),
        Param("latency", "time", 1_000, "one-way latency of every message"),
        Param("leak_from_round", "int", 0, "first round that leaks (the rounds before are clean)", minimum=0),
    ),
    build=build,
    handlers={
        "hub": {"start": hub_start, "done": hub_done},
        "worker": {"work": worker_work, "finish": worker_finish},
    },
    summarize=summarize,
    view=ScenarioView(rank_role="worker"),
)
