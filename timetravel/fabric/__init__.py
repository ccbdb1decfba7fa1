"""The simulated fabric: a Clos network with congestion, GPU streams with a race detector, seeded faults.

The "digital twin" of a training cluster's hardware (DESIGN.md, section Fabric; docs/fabric.md).
Everything it keeps is plain data in the World: link state in ``world.fabric``, each rank's GPU in
``state["gpu"]``, the fault schedule in ``world.faults``.

Integration API for a scenario (the whole of it)::

    from timetravel import fabric

    HOOKS = fabric.Hooks(on_crash=..., on_restart=..., find_buffer=..., on_fault=...)  # all optional

    def build(config, seed):
        world = World("mine", config, seed)
        ranks = [f"r{i}" for i in range(config["ranks"])]
        for name in ranks:
            world.add_node(name, "rank", {"buffers": {"grad": np.zeros(1024, np.float32)}})
        fabric.install(world, ranks, hooks=HOOKS, buffers=("grad",))   # after the nodes exist
        ...                                                            # first events
        return world

    SCENARIO = Scenario(
        name="mine", summary="...", build=build,
        params=(Param("ranks", "int", 16, "..."), *fabric.fabric_params(gpus_per_host=4)),
        handlers=fabric.with_handlers({"rank": {...}}, HOOKS),
        transport=fabric.transport,
    )

In handlers: ``ctx.send(dst, kind, payload, nbytes)`` goes over the fabric; GPU work is
``fabric.launch(ctx, stream, name, duration_ns, reads=(), writes=(), done_kind=None, payload=None,
started_kind=None)``, ``fabric.record(ctx, stream, event)``, ``fabric.wait(ctx, stream, event)`` and
``fabric.finish(ctx, stream)`` for an open (``duration_ns=None``) kernel. ``fabric.summary(world)``
gives the schedule and what each fault did, for a scenario's ``summarize``.
"""

from __future__ import annotations

from typing import Any

from timetravel.fabric.edit import edit_fault
from timetravel.fabric.fault_kinds import EXPECTED_OUTCOMES, FAULT_KINDS, VIEW_STATES, expected_outcome
from timetravel.fabric.faults import add_fault, find_fault, remove_fault
from timetravel.fabric.gpu import (
    DONE_KIND,
    GPU_KEY,
    event_done,
    finish,
    idle,
    launch,
    record,
    running_kernel,
    schedule_finishes,
    wait,
)
from timetravel.fabric.hooks import BUFFERS_KEY, Hooks
from timetravel.fabric.install import FABRIC_EVENT_KINDS, install, with_handlers
from timetravel.fabric.network import HELD_KIND, transport
from timetravel.fabric.params import FABRIC_PARAM_NAMES, FABRIC_PARAMS, fabric_params, fabric_settings
from timetravel.fabric.schedule import FAULT_KIND
from timetravel.fabric.topology import Topology
from timetravel.sim.world import World


def summary(world: World) -> dict[str, Any]:
    """The fault schedule with each record's hits and expected outcome (for ``summarize`` and reports)."""
    fabric = world.fabric
    restartable = bool(fabric.get("restartable"))
    hits = fabric.get("fault_hits", {})
    return {
        "faults": [
            {**fault, "hits": hits.get(fault["id"], 0), "expected": expected_outcome(fault, restartable)}
            for fault in world.faults
        ],
        "down": dict(world.down),
    }


__all__ = [
    "BUFFERS_KEY",
    "DONE_KIND",
    "EXPECTED_OUTCOMES",
    "FABRIC_EVENT_KINDS",
    "FABRIC_PARAMS",
    "FABRIC_PARAM_NAMES",
    "FAULT_KIND",
    "FAULT_KINDS",
    "GPU_KEY",
    "HELD_KIND",
    "VIEW_STATES",
    "Hooks",
    "Topology",
    "add_fault",
    "edit_fault",
    "event_done",
    "expected_outcome",
    "fabric_params",
    "fabric_settings",
    "find_fault",
    "finish",
    "idle",
    "install",
    "launch",
    "record",
    "remove_fault",
    "running_kernel",
    "schedule_finishes",
    "summary",
    "transport",
    "wait",
    "with_handlers",
]
