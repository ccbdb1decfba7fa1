"""The rdma_fork Scenario object: build, handlers, fault hooks and the summary."""

from __future__ import annotations

from typing import Any

from timetravel import fabric
from timetravel.scenarios.rdma_fork import process
from timetravel.scenarios.rdma_fork.params import PARAMS, check_config, dontfork_applies, node_names
from timetravel.sim import Scenario, ScenarioView, World

SCENARIO_NAME = "rdma_fork"
ROLE_HOST = "host"
HOOKS = fabric.Hooks(on_crash=process.on_crash, on_restart=process.on_restart)


def build(config: dict[str, Any], seed: int) -> World:
    check_config(config)
    world = World(SCENARIO_NAME, config, seed)
    names = node_names(config)
    first = config["last_node"] - config["nodes"] + 1
    for offset, name in enumerate(names):
        world.add_node(name, ROLE_HOST, process.initial_state(first + offset))
    fabric.install(world, names, hooks=HOOKS)
    for name in names:
        world.schedule(0, name, process.START, 0)
    return world


def summarize(world: World) -> dict[str, Any]:
    """``summary`` of ``run --json``: launches, and the failed launch's node, page and registration."""
    launches = sum(state["launches"] for state in world.nodes.values())
    summary: dict[str, Any] = {
        "nodes": len(world.nodes),
        "launches": launches,
        "launch": world.config["launch"],
        "dontfork": dontfork_applies(world.config),
    }
    for failure in world.failures:
        state = world.nodes.get(failure["node"] or "")
        detail = state.get("fork_failure") if state is not None else None
        if detail is not None:
            summary["failed_node"] = failure["node"]
            summary["missing_page"] = detail["page"]
            summary["registration"] = detail["registration"]["name"]
            summary["lived_on"] = "; ".join(detail["lived_on"])
            summary["symptom"] = detail["symptom"]
    return summary


SCENARIO = Scenario(
    name=SCENARIO_NAME,
    summary="subprocess launches that fail on a few hosts of a large job: RDMA fork safety and page rounding",
    params=PARAMS,
    build=build,
    handlers=fabric.with_handlers({ROLE_HOST: process.HANDLERS}, HOOKS),
    transport=fabric.transport,
    summarize=summarize,
    determinism="forbid",
    view=ScenarioView(rank_role=ROLE_HOST, fault_states=fabric.VIEW_STATES),
)
