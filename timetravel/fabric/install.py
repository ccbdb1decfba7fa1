"""Putting the fabric into a scenario: ``install`` in ``build``, ``with_handlers`` around the handler table.

``install(world, ranks, hooks=..., buffers=...)`` is the one call a scenario's ``build`` makes after
adding its nodes. It reads the fabric's config keys from ``world.config``, sizes the cluster for
``len(ranks)`` GPUs (rank i is the i-th name: GPUs 0..gpus_per_host-1 share host 0, and so on),
lays out the link tables in ``world.fabric``, gives each rank an idle GPU (``state["gpu"]``), and
draws or parses the fault schedule into ``world.faults`` with its events queued. It returns the
:class:`Topology`, for scenarios that want to place work by host or leaf.

``with_handlers(handlers, hooks)`` returns the scenario's handler table with the fabric's three
event kinds added to every role: ``fault`` (fault start/end), ``gpu.done`` (kernel completions,
which then call the scenario's ``done_kind`` handler) and ``fabric.held`` (a message held by a
partition, re-sent when it heals). A scenario that defines one of those kinds itself is refused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from timetravel.fabric.faults import make_fault_handler
from timetravel.fabric.gpu import DONE_KIND, GPU_KEY, make_done_handler, new_gpu_state
from timetravel.fabric.hooks import Hooks
from timetravel.fabric.network import HELD_KIND, on_held
from timetravel.fabric.params import fabric_settings, topology_from_settings
from timetravel.fabric.schedule import (
    FAULT_KIND,
    ScheduleContext,
    fault_number,
    normalize_record,
    parse_schedule,
    schedule_fault_events,
)
from timetravel.fabric.swarm import draw_swarm
from timetravel.fabric.topology import Topology
from timetravel.sim.scenario import ConfigError, Handler
from timetravel.sim.world import World

FABRIC_EVENT_KINDS = (FAULT_KIND, DONE_KIND, HELD_KIND)
FABRIC_FORMAT = 1
"""Version of the layout of ``world.fabric`` (bumped when a key changes meaning)."""


def install(
    world: World,
    ranks: Sequence[str],
    *,
    hooks: Hooks | None = None,
    buffers: Sequence[str] = (),
) -> Topology:
    """Install the fabric for the nodes named in ``ranks`` (see the module docstring).

    ``buffers`` names the buffers a corrupt fault may flip a bit of (swarm testing picks from
    them; an explicit schedule naming another buffer is refused). ``hooks`` tells swarm testing
    whether the scenario can restart a crashed node.
    """
    hooks = hooks or Hooks()
    ranks = list(ranks)
    _check_ranks(world, ranks)
    settings = fabric_settings(world.config)
    topology = topology_from_settings(len(ranks), settings)
    world.fabric.clear()
    world.fabric.update(_fabric_state(topology, ranks, settings, hooks, buffers))
    for name in ranks:
        world.nodes[name][GPU_KEY] = new_gpu_state()
    records = _fault_records(world, ranks, settings, topology, hooks, buffers)
    world.faults.extend(records)
    world.fabric["fault_id_max"] = max((fault_number(record["id"]) for record in records), default=0)
    for record in records:
        world.fabric["fault_hits"][record["id"]] = 0
        schedule_fault_events(world, record)
    return topology


def _check_ranks(world: World, ranks: list[str]) -> None:
    if not ranks:
        raise ValueError("fabric.install needs at least one rank")
    if len(set(ranks)) != len(ranks):
        raise ValueError("fabric.install: rank names repeat")
    missing = [name for name in ranks if name not in world.nodes]
    if missing:
        raise ValueError(f"fabric.install: add the rank nodes first; {missing[0]!r} is not a node")
    if world.faults:
        raise ValueError("fabric.install: the world has a fault schedule already")


def _fabric_state(
    topology: Topology, ranks: list[str], settings: Mapping[str, Any], hooks: Hooks, buffers: Sequence[str]
) -> dict[str, Any]:
    return {
        "format": FABRIC_FORMAT,
        "topology": topology.to_data(),
        "ranks": ranks,
        "rank_of": {name: index for index, name in enumerate(ranks)},
        **link_tables(topology, settings),
        "control_latency_ns": settings["control_latency"],
        "race_detector": settings["race_detector"],
        "restartable": hooks.restartable,
        "buffers": list(buffers),
        "message_rules": {},
        "links_down": {},
        "active_faults": {},
        "fault_hits": {},
        "fault_id_max": 0,
    }


def link_tables(topology: Topology, settings: Mapping[str, Any]) -> dict[str, Any]:
    """What timing a message or a collective on ``topology`` reads (fabric/collective_timing.py): the
    route arithmetic, each link's latency, bandwidth and busy-until time, and the jitter. A scenario
    that times its own traffic on the fabric (the torch backend) keeps just these in ``world.fabric``."""
    return {
        "route": [
            topology.ranks,
            topology.gpus_per_host,
            topology.ranks_per_leaf,
            topology.spines,
            topology.leaf_up_base,
            topology.spine_down_base,
        ],
        "link_latency_ns": topology.latency_table(),
        "link_bytes_per_s": topology.bandwidth_table(),
        "link_busy_until_ns": [0] * topology.link_count,
        "jitter_ns": settings["network_jitter"],
    }


def _fault_records(
    world: World,
    ranks: list[str],
    settings: Mapping[str, Any],
    topology: Topology,
    hooks: Hooks,
    buffers: Sequence[str],
) -> list[dict[str, Any]]:
    spec = settings["faults"]
    context = ScheduleContext(world.nodes, ranks, topology, buffers)
    if spec in ("none", None, ""):
        return []
    if spec == "swarm":
        raw = draw_swarm(world, ranks, settings, restartable=hooks.restartable, buffers=buffers)
        return [normalize_record(item, item["id"], context) for item in raw]
    if isinstance(spec, str):
        raise ConfigError(
            f"config key 'faults': expected none, swarm, a JSON list of fault records or @file.json, got {spec!r}"
        )
    return parse_schedule(spec, context)


def with_handlers(
    handlers: Mapping[str, Mapping[str, Handler]], hooks: Hooks | None = None
) -> dict[str, dict[str, Handler]]:
    """The scenario's handler table with the fabric's ``fault``, ``gpu.done`` and ``fabric.held`` in every role."""
    hooks = hooks or Hooks()
    on_fault = make_fault_handler(hooks)
    merged: dict[str, dict[str, Handler]] = {}
    for role, table in handlers.items():
        clash = [kind for kind in FABRIC_EVENT_KINDS if kind in table]
        if clash:
            raise ValueError(f"role {role!r} defines {clash[0]!r}, an event kind the fabric handles")
        combined = dict(table)
        combined[FAULT_KIND] = on_fault
        combined[HELD_KIND] = on_held
        combined[DONE_KIND] = make_done_handler(combined)
        merged[role] = combined
    return merged
