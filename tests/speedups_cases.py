"""Runs that exercise every path of the kernel's hot code; prints their results as JSON.

``tests/test_speedups.py`` runs this file twice, with the compiled core and with
``TIMETRAVEL_PURE_PYTHON=1``, and requires identical output: the compiled core must give the same
bits as the pure-Python kernel (choice values, the hash chain, the state hash, the heap's layout,
failures and their messages).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from timetravel.scenarios import get_scenario
from timetravel.sim import Context, Event, Scenario, Simulation, World, chain_head, speedups


def _finish(world: World) -> dict[str, Any]:
    return {
        "events": world.events_processed,
        "t_ns": world.t_ns,
        "seq": world.seq,
        "state_hash": world.state_hash(),
        "chain": chain_head(world),
        "queue_layout": [[event[0], event[1], event[2], event[3]] for event in world.queue],
        "failures": world.failures,
    }


def scenario_runs() -> dict[str, Any]:
    """The built-in scenarios: whole runs, partial runs (queue layout), seeks, pauses."""
    results: dict[str, Any] = {}
    cases = [
        ("pingpong", {}, [0, 3]),
        ("gossip", {}, [0]),
        ("needle", {}, [0, 3]),
        ("leaky", {}, [0]),
        ("dp_training", {"ranks": 8, "steps": 3}, [0]),
    ]
    for name, settings, seeds in cases:
        scenario = get_scenario(name)
        config = scenario.resolve_config(settings)
        for seed in seeds:
            world = scenario.build(config, seed)
            Simulation(scenario, world).run()
            results[f"{name}:{seed}"] = _finish(world)
            world = scenario.build(config, seed)
            Simulation(scenario, world).run(max_events=37)
            results[f"{name}:{seed}:partial"] = _finish(world)
            world = scenario.build(config, seed)
            digests: list[str] = []
            pauses: list[int] = []
            simulation = Simulation(
                scenario,
                world,
                chain_batch_events=7,
                on_chain_batch=lambda first, events, digest: digests.append(f"{first}:{digest.hex()}"),  # noqa: B023
            )
            simulation.run(
                until_ns=world.t_ns + 2_000_000,
                pause_every_events=11,
                on_pause=lambda sim: pauses.append(sim.world.events_processed),  # noqa: B023
            )
            results[f"{name}:{seed}:until"] = {**_finish(world), "digests": digests, "pauses": pauses}
    return results


BOUNDS = [1, 2, 1000, (1 << 63) + 5, (1 << 64) - 1, 1 << 64]
"""Choice bounds from the smallest to the largest allowed (2**64 itself takes the Python path)."""


def _draw(state: dict[str, Any], event: Event, ctx: Context) -> None:
    payload = event.payload
    values = state["values"]
    draws = []
    for bound in BOUNDS[: payload["bounds"]]:
        draws.append(ctx.choose("site.a", bound))
    values.append(sum(draws) % 1_000_003)
    values.append(ctx.choose(site="site.kw", bound=1000))
    values.append(ctx.chance("site.chance", 0.5))
    values.append(ctx.order("site.order", ["x", "y", "z", "w"]))
    if payload["more"] > 0:
        ctx.timer(0, "draw", {**payload, "more": payload["more"] - 1})
        ctx.timer(delay_ns=payload["more"], kind="draw", payload={**payload, "more": payload["more"] - 1})
        ctx.deliver(ctx.now + 3, "n2", "draw", payload={**payload, "more": payload["more"] - 2})
        ctx.send("n2", "draw", {**payload, "more": payload["more"] - 3})


def _bad(state: dict[str, Any], event: Event, ctx: Context) -> None:
    action = event.payload
    if action == "negative_timer":
        ctx.timer(-1, "never")
    elif action == "float_timer":
        ctx.timer(1.0, "never")  # type: ignore[arg-type]
    elif action == "past_delivery":
        ctx.deliver(ctx.now - 1, "n1", "never")
    elif action == "zero_bound":
        ctx.choose("site.bad", 0)
    elif action == "float_bound":
        ctx.choose("site.bad", 3.0)  # type: ignore[arg-type]
    elif action == "unknown_send":
        ctx.send("nobody", "never")
    elif action == "unknown_node":
        ctx.deliver(ctx.now, "ghost", "never")
    elif action == "unhandled":
        ctx.timer(1, "no_such_kind")
    elif action == "fail":
        ctx.fail("oracle", "asked to fail")
    elif action == "raise":
        raise RuntimeError("a bug in a handler")


def _draws_world(config: dict[str, Any], seed: int) -> World:
    world = World("draws", config, seed)
    world.add_node("n1", "node", {"values": []})
    world.add_node("n2", "node", {"values": []})
    world.schedule(0, "n1", "draw", {"bounds": len(BOUNDS), "more": 4})
    world.schedule(0, "n2", "draw", {"bounds": 3, "more": 3})
    for index, action in enumerate(config.get("bad", [])):
        world.schedule(50 + index, "n1", "bad", action)
    return world


DRAWS = Scenario("draws", "", (), _draws_world, {"node": {"draw": _draw, "bad": _bad}})
BAD_ACTIONS = [
    "negative_timer",
    "float_timer",
    "past_delivery",
    "zero_bound",
    "float_bound",
    "unknown_send",
    "unknown_node",
    "unhandled",
    "fail",
    "raise",
]


class CountingLog(list[list[Any]]):
    """A choice log that overrides ``append`` (as the minimizer's does): every draw must reach it."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = 0

    def append(self, entry: list[Any]) -> None:
        self.seen += 1
        if entry[3] % 2:
            super().append(entry)


def draw_runs() -> dict[str, Any]:
    """Every kind of choice, timers and deliveries with keywords, overrides, the choice log, errors."""
    results: dict[str, Any] = {}
    world = DRAWS.build({}, 5)
    Simulation(DRAWS, world).run()
    results["draws"] = {**_finish(world), "nodes": world.nodes}
    log: list[list[Any]] = []
    world = DRAWS.build({}, 5)
    overrides = {("n1", "site.a", 2): 7, ("n2", "site.kw", 1): 3}
    Simulation(DRAWS, world, overrides=overrides, choice_log=log).run()
    results["draws:overrides"] = {**_finish(world), "nodes": world.nodes, "log": log}
    for name, choice_log in (("list", []), ("subclass", CountingLog())):
        world = DRAWS.build({}, 5)
        Simulation(DRAWS, world, choice_log=choice_log).run()
        seen = getattr(choice_log, "seen", len(choice_log))
        results[f"draws:log:{name}"] = {**_finish(world), "log": list(choice_log), "seen": seen}
    world = DRAWS.build({}, 5)
    world.down["n2"] = 0
    Simulation(DRAWS, world, chain=False).run()
    results["draws:down"] = {**_finish(world), "nodes": world.nodes}
    for action in BAD_ACTIONS:
        world = DRAWS.build({"bad": [action]}, 5)
        result = Simulation(DRAWS, world).run()
        results[f"bad:{action}"] = {**_finish(world), "stop": result.stop, "nodes": world.nodes}
    return results


def main() -> None:
    results = {**scenario_runs(), **draw_runs()}
    json.dump(
        {"implementation": speedups.kernel_implementation(), "results": results}, sys.stdout, default=repr
    )


if __name__ == "__main__":
    main()
