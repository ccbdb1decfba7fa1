"""One node and one scheduled event, for the kernel's tests: the world and what its run returned."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timetravel.sim import Context, Event, RunResult, Scenario, Simulation, World


def run_one_node(
    name: str,
    handler: Callable[[dict[str, Any], Event, Context], None],
    *,
    seed: int = 0,
    t_ns: int = 0,
    event: str = "go",
    node: str = "n",
    kind: str = "node",
) -> tuple[World, RunResult]:
    """Scenario ``name``'s world of one node ``node`` (a ``kind``) whose only event, ``event`` at
    ``t_ns``, runs ``handler``; run to its end."""

    def build(config: dict[str, Any], seed: int) -> World:
        world = World(name, config, seed)
        world.add_node(node, kind)
        world.schedule(t_ns, node, event)
        return world

    world = build({}, seed)
    result = Simulation(Scenario(name, "", (), build, {kind: {event: handler}}), world).run()
    return world, result
