"""A probe scenario for the fabric tests: nodes that send what they are told and record what arrives.

``go`` events carry a list of sends ``[dst, kind, payload, nbytes]`` (and may run a test's own
function for GPU work); every other event a rank receives is recorded as ``[t_ns, kind, payload]``
in ``state["got"]``. The default topology is small enough to reason about by hand: 2 GPUs per host,
leaves of radix 8 (4 NIC ports, so 2 hosts = 4 ranks per leaf, and 4 spines), no jitter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timetravel import fabric
from timetravel.sim import Context, Event, Param, RunResult, Scenario, Simulation, World

PROBE_SETTINGS = {"gpus_per_host": 2, "leaf_radix": 8, "network_jitter": 0}
RECORDED_KINDS = ("msg", "other", "done", "started", "backward_done")
MIB = 1 << 20


def probe_scenario(
    *, go: Callable[[dict[str, Any], Context], None] | None = None, hooks: fabric.Hooks | None = None
) -> Scenario:
    def on_go(state: dict[str, Any], event: Event, ctx: Context) -> None:
        for dst, kind, payload, nbytes in event.payload or ():
            ctx.send(dst, kind, payload, nbytes)
        if go is not None:
            go(state, ctx)

    def on_record(state: dict[str, Any], event: Event, ctx: Context) -> None:
        state["got"].append([ctx.now, event.kind, event.payload])

    def build(config: dict[str, Any], seed: int) -> World:
        world = World("probe", config, seed)
        ranks = [f"r{index}" for index in range(config["ranks"])]
        for name in ranks:
            world.add_node(name, "rank", {"got": [], "buffers": {}})
        world.add_node("ctl", "control", {"got": []})
        fabric.install(world, ranks, hooks=hooks)
        return world

    table = {"go": on_go, **dict.fromkeys(RECORDED_KINDS, on_record)}
    return Scenario(
        name="probe",
        summary="fabric test probe",
        params=(Param("ranks", "int", 16, "ranks"), *fabric.fabric_params(**PROBE_SETTINGS)),
        build=build,
        handlers=fabric.with_handlers({"rank": table, "control": table}, hooks),
        transport=fabric.transport,
    )


def probe_world(scenario: Scenario, seed: int = 1, **settings: Any) -> World:
    return scenario.build(scenario.resolve_config(settings), seed)


def run(scenario: Scenario, world: World, **kwargs: Any) -> RunResult:
    return Simulation(scenario, world, **kwargs).run()


def arrivals(world: World, node: str, kind: str | None = None) -> list[list[Any]]:
    return [entry for entry in world.nodes[node]["got"] if kind is None or entry[1] == kind]
