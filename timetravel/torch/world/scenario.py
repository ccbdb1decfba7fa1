"""The scenario ``torch``: the user's torch.distributed script as N ranks under the World.

Nodes: ``r0`` … ``rN-1`` (role ``rank``: the user's processes, :mod:`.ranks`), ``c10d`` (role
``collectives``: the simulated backend as plain data, :mod:`.c10d`) and the rendezvous ``store``
(:mod:`.store`). The ranks' processes belong to the run's :class:`~.host.RankHost`
(``Scenario.processes``): a Simulation owns one per run, a torch Session's world source owns the one
its re-executions use (:mod:`.world_source`).

When a collective completes, its results go to the ranks at once (they only depend on the result and
its logical completion time, so a rank may run ahead in wall time without changing a bit), and the
rank's next ``poll`` is scheduled at that time: ranks run in parallel between collectives.
"""

from __future__ import annotations

from typing import Any

from timetravel.sim.context import Context
from timetravel.sim.guard.state import MODE_OFF
from timetravel.sim.launch import NO_LAUNCH, Launch
from timetravel.sim.scenario import Scenario, ScenarioView
from timetravel.sim.world import World
from timetravel.torch.protocol.limits import SNAPSHOT_ELIDE_BYTES_MIN, SNAPSHOT_EVERY_EVENTS_TORCH
from timetravel.torch.world import (
    c10d,
    digests,
    duplicates,
    hangs,
    minimizing,
    ranks,
    resume,
    silent,
    store,
    swarm,
    timing,
    workdir,
)
from timetravel.torch.world import state as training_state
from timetravel.torch.world.faults import parse_faults
from timetravel.torch.world.host import RankHost
from timetravel.torch.world.params import PARAMS
from timetravel.torch.world.specs import C10D_NODE, script_digest, script_to_run


def build(config: dict[str, Any], seed: int, launch: Launch = NO_LAUNCH) -> World:
    """The initial World of a run of ``config``'s script (or function), which the user named (``launch``)."""
    script = script_to_run(config, launch)
    workdir_sha256 = workdir.source_digest(config["workdir"])
    world = World("torch", config, seed)
    count = config["nproc"] * config["nnodes"]
    world.faults = (
        swarm.draw(world, count) if config["faults"] == "swarm" else parse_faults(config["faults"], count)
    )
    world.fabric = {**timing.fabric_state(config), "fault_hits": {}}
    for rank in range(count):
        world.add_node(f"r{rank}", "rank", ranks.rank_state(0, 0))
    digest = script_digest(str(script)) if script is not None else config["function"]
    initial = {**c10d.initial_state(count, digest), "workdir_sha256": workdir_sha256}
    world.add_node(C10D_NODE, "collectives", initial)
    world.add_node(store.STORE_NODE, "store", store.initial_state())
    for rank in range(count):
        world.schedule(0, f"r{rank}", "poll", 0)
    return world


def on_end(world: World, ctx: Context) -> None:
    """The queue drained: ranks still waiting in a collective are a hang; then the ranks end."""
    try:
        hangs.report_hang(world, ctx)
    finally:
        ctx.processes.stop_world(world)
    # after the ranks ended: each may run a reference (world/reference.py)
    resume.check(world, ctx)
    silent.check(world, ctx)
    if not world.failures:
        c10d.warn_if_never_distributed(world.nodes[C10D_NODE], ctx)


def summarize(world: World) -> dict[str, Any]:
    state = world.nodes[C10D_NODE]
    warnings = state.get("warnings", {})
    outside = warnings.get("write_outside_workdir")
    first_write_outside = {"first_write_outside_workdir": outside["detail"]} if outside else {}
    duplicated = warnings.get(duplicates.WARNING)
    first_duplicate = {duplicates.WARNING: duplicated["detail"]} if duplicated else {}
    never = warnings.get(c10d.NO_COLLECTIVES)
    never_distributed = {c10d.NO_COLLECTIVES: never["detail"]} if never else {}
    return {
        "ranks": state["ranks"],
        "collectives": state["completed"],
        "optimizer_steps": state["steps_checked"],
        "script_sha256": state["script_sha256"][:16],
        "warnings": sorted(warnings),
        **first_write_outside,
        **first_duplicate,
        **never_distributed,
        "restarts": state["restarts"],
    }


def _repro_setup(config: dict[str, Any], launch: Launch) -> tuple[str, str]:
    from timetravel.torch.world.recorded_script import repro_setup

    return repro_setup(config, launch)


def _torch_worlds(session: Any) -> Any:
    from timetravel.torch.world.world_source import TorchWorlds

    return TorchWorlds(session)


SCENARIO = Scenario(
    name="torch",
    summary="your torch.distributed script as N ranks: time, network, arrival order and faults from the World",
    params=PARAMS,
    build=build,
    build_launched=build,
    handlers={
        "rank": {
            "poll": ranks.on_poll,
            "metric": ranks.on_metric,
            "restart": ranks.on_restart,
            "state": training_state.on_state,
            "logical": training_state.on_logical,
            "batch": training_state.on_batch,
        },
        "collectives": {kind: ranks.obeying(handler) for kind, handler in c10d.HANDLERS.items()},
        "store": store.HANDLERS,
    },
    on_end=on_end,
    summarize=summarize,
    determinism=MODE_OFF,
    world_source=_torch_worlds,
    processes=RankHost,
    view=ScenarioView(
        rank_role="rank",
        step_key="state_step",
        status_key="status",
        collectives_role=C10D_NODE,
        fault_states={"slow": "slow", "partition": "partitioned"},
    ),
    describe_divergence=digests.describe_divergence,
    divergence_t_ns=digests.divergence_t_ns,
    failure_identity=minimizing.failure_identity,
    past_failure=minimizing.past_failure,
    size_floor=minimizing.size_floor,
    repro_setup=_repro_setup,
    snapshot_every_events=SNAPSHOT_EVERY_EVENTS_TORCH,
    snapshot_elide_bytes_min=SNAPSHOT_ELIDE_BYTES_MIN,
)
