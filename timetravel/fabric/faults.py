"""Applying faults: what each kind does when its ``fault`` event fires, and editing a live schedule.

The records and their validation live in schedule.py; the swarm draw in swarm.py. Here:

* **partition** (start -> end): messages between the cut side and the rest are dropped, or held
  and re-sent by their sender when the partition heals (``mode: hold``). The side is the target,
  ``nodes``, or with ``scope: host`` every rank of those hosts; ``peers`` narrows the other side
  (a split between two groups); ``direction`` ``out``/``in`` makes it one-way. Or ``links`` /
  ``spines`` cut links: ECMP then routes around a cut spine link, and a message with no way round
  is dropped or held.
* **slow** (start -> end): the target's four links run at ``bandwidth_factor`` of their bandwidth
  and its kernels take ``compute_factor`` times longer (for kernels launched in the window).
* **corrupt**: with ``buffer``, one bit of that numpy buffer of the target flips at ``t_start``
  (``state["buffers"][name]`` unless the scenario's ``find_buffer`` hook says otherwise); without
  it, one bit of the first numpy array (or bytes) in up to ``count`` matching messages in flight.
* **crash** (start -> end): the node goes into ``world.down`` (the kernel drops every event for it
  but ``fault``), its GPU work is lost, and the scenario's ``on_crash`` hook runs. At ``t_end`` the
  scenario's ``on_restart`` hook brings it back; without that hook the node stays down.
* **drop / duplicate / reorder / delay** (start -> end): each matching message (sent by the target,
  or to it with ``direction``; optionally only to/from ``peer`` and only of ``kinds``) is affected
  with ``probability`` (a ``chance`` at the fault's own site ``fault.<id>.<kind>``, e.g.
  ``fault.f7.drop``; choice 0 means "not affected" unless the probability is 1), at most ``count``
  times (null: no limit).

Every draw a fault makes is on sites named by its id (schedule.fault_site), so removing one fault
never shifts another's draws: what a minimizer relies on when it deletes faults one by one.

The fabric counts what each fault did in ``world.fabric["fault_hits"][id]`` (messages dropped,
held, duplicated, delayed, corrupted; bits flipped; 1 for a crash or slow window that took
effect) and logs each effect, so a user (and a test)
can see that a fault bit, and a minimizer can see that one never did.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from timetravel.fabric.fault_kinds import acts_once
from timetravel.fabric.gpu import GPU_KEY, reset_gpu
from timetravel.fabric.hooks import BUFFERS_KEY, Hooks
from timetravel.fabric.network import flip_bit
from timetravel.fabric.schedule import (
    ScheduleContext,
    fault_number,
    normalize_record,
    schedule_fault_events,
)
from timetravel.fabric.topology import Topology
from timetravel.sim.scenario import ConfigError

if TYPE_CHECKING:
    from timetravel.sim.context import Context
    from timetravel.sim.event import Event
    from timetravel.sim.scenario import Handler
    from timetravel.sim.world import World


def find_fault(world: World, fault_id: str) -> dict[str, Any] | None:
    """The record with this id in ``world.faults``, or None (removed from the schedule)."""
    for record in world.faults:
        if record["id"] == fault_id:
            return record
    return None


def make_fault_handler(hooks: Hooks) -> Handler:
    """The ``fault`` event handler, bound to the scenario's hooks."""

    def on_fault(state: dict[str, Any], event: Event, ctx: Context) -> None:
        fault_id, phase = event.payload
        record = find_fault(ctx.world, fault_id)
        if record is None:
            return
        if phase == "start":
            start_fault(record, state, ctx, hooks)
        else:
            end_fault(record, state, ctx, hooks)
        if hooks.on_fault is not None:
            hooks.on_fault(state, ctx, record, phase)

    return on_fault


def start_fault(record: dict[str, Any], state: dict[str, Any], ctx: Context, hooks: Hooks) -> None:
    fabric = ctx.world.fabric
    kind = record["kind"]
    fabric["fault_hits"].setdefault(record["id"], 0)
    ctx.log(f"fault {record['id']}: {kind} starts on {record['target']}")
    if kind == "crash":
        _crash(record, state, ctx, hooks)
    elif kind == "slow":
        fabric["active_faults"][record["id"]] = [kind, record["target"]]
        fabric["fault_hits"][record["id"]] += 1
        apply_slow(ctx.world, record["target"])
    elif acts_once(record):
        _corrupt_buffer(record, state, ctx, hooks)
    else:
        _activate_rule(fabric, record)


def end_fault(record: dict[str, Any], state: dict[str, Any], ctx: Context, hooks: Hooks) -> None:
    ctx.log(f"fault {record['id']}: {record['kind']} ends on {record['target']}")
    deactivate(ctx.world, record["id"])
    if record["kind"] == "crash":
        _restart(record, state, ctx, hooks)


def deactivate(world: World, fault_id: str) -> None:
    """Undo a fault's effect on the fabric (rules, cut links, slow factors); a no-op if it is not active.

    A world whose faults are not fabric rules (the torch scenario's act at the collective layer, by
    their time window alone) has no rule tables: nothing to undo there."""
    fabric = world.fabric
    rule = fabric.get("message_rules", {}).pop(fault_id, None)
    if rule is not None and rule["cut_links"] is not None:
        links_down = fabric["links_down"]
        for link in rule["cut_links"]:
            holders = links_down.get(str(link), [])
            if fault_id in holders:
                holders.remove(fault_id)
            if not holders:
                links_down.pop(str(link), None)
    active = fabric.get("active_faults", {}).pop(fault_id, None)
    if active is not None and active[0] == "slow":
        apply_slow(world, active[1])


# -- message rules --------------------------------------------------------------------------------


def _activate_rule(fabric: dict[str, Any], record: dict[str, Any]) -> None:
    topology = Topology.from_data(fabric["topology"])
    rule = prepare_rule(record, topology, fabric["ranks"])
    fabric["message_rules"][record["id"]] = rule
    fabric["active_faults"][record["id"]] = [record["kind"], record["target"]]
    for link in rule["cut_links"] or ():
        fabric["links_down"].setdefault(str(link), []).append(record["id"])


def prepare_rule(record: Mapping[str, Any], topology: Topology, ranks: list[str]) -> dict[str, Any]:
    """The form of a record the send path checks quickly (sets as dicts, link lists expanded)."""
    params = record["params"]
    rule: dict[str, Any] = {
        "id": record["id"],
        "kind": record["kind"],
        "target": record["target"],
        "t_end_ns": record["t_end"],
        "cut_links": None,
    }
    if record["kind"] == "partition":
        rule.update(
            side=_partition_side(record, topology, ranks),
            peers=None if params["peers"] is None else dict.fromkeys(params["peers"], True),
            direction=params["direction"],
            mode=params["mode"],
        )
        if params["links"] is not None or params["spines"] is not None:
            rule["cut_links"] = _cut_links(params, topology)
        return rule
    rule.update(
        direction=params["direction"],
        peer=params["peer"],
        kinds=None if params["kinds"] is None else dict.fromkeys(params["kinds"], True),
        probability=params["probability"],
        count=params["count"],
    )
    for name in ("delay_ns", "window_ns", "gap_ns", "element", "bit"):
        if name in params:
            rule[name] = params[name]
    return rule


def _partition_side(record: Mapping[str, Any], topology: Topology, ranks: list[str]) -> dict[str, bool]:
    params = record["params"]
    members = list(params["nodes"]) if params["nodes"] is not None else [record["target"]]
    if params["scope"] == "host":
        rank_of = {name: index for index, name in enumerate(ranks)}
        hosts = [topology.host_of(rank_of[name]) for name in members if name in rank_of]
        for host in hosts:
            first = host * topology.gpus_per_host
            members += ranks[first : min(first + topology.gpus_per_host, len(ranks))]
    return dict.fromkeys(members, True)


def _cut_links(params: Mapping[str, Any], topology: Topology) -> list[int]:
    links = set(params["links"] or ())
    for spine in params["spines"] or ():
        for leaf in range(topology.leaves):
            links.add(topology.leaf_up_base + leaf * topology.spines + spine)
            links.add(topology.spine_down_base + leaf * topology.spines + spine)
    return sorted(links)


# -- node faults ----------------------------------------------------------------------------------


def apply_slow(world: World, node: str) -> None:
    """Set a node's link bandwidths and compute factor from every slow fault active on it."""
    fabric = world.fabric
    bandwidth_factor = 1.0
    compute_factor = 1.0
    for fault_id, (kind, target) in fabric["active_faults"].items():
        record = find_fault(world, fault_id) if kind == "slow" and target == node else None
        if record is not None:
            bandwidth_factor *= record["params"]["bandwidth_factor"]
            compute_factor *= record["params"]["compute_factor"]
    rank = fabric["rank_of"].get(node)
    if rank is not None:
        topology = Topology.from_data(fabric["topology"])
        for link in topology.rank_links(rank):
            fabric["link_bytes_per_s"][link] = max(1, int(topology.link_bytes_per_s(link) * bandwidth_factor))
    gpu = world.nodes[node].get(GPU_KEY)
    if gpu is not None:
        gpu["compute_factor"] = compute_factor


def _crash(record: dict[str, Any], state: dict[str, Any], ctx: Context, hooks: Hooks) -> None:
    world = ctx.world
    node = record["target"]
    if node in world.down:
        ctx.log(f"fault {record['id']}: {node} is down already")
        return
    world.down[node] = ctx.now
    world.fabric["fault_hits"][record["id"]] += 1
    if GPU_KEY in state:
        reset_gpu(state)
    if hooks.on_crash is not None:
        hooks.on_crash(state, ctx, record)


def _restart(record: dict[str, Any], state: dict[str, Any], ctx: Context, hooks: Hooks) -> None:
    world = ctx.world
    node = record["target"]
    if node not in world.down:
        return
    if hooks.on_restart is None:
        ctx.log(f"fault {record['id']}: {node} stays down (the scenario has no restart hook)")
        return
    del world.down[node]
    hooks.on_restart(state, ctx, record)


def _corrupt_buffer(record: dict[str, Any], state: dict[str, Any], ctx: Context, hooks: Hooks) -> None:
    name = record["params"]["buffer"]
    array = hooks.find_buffer(state, name) if hooks.find_buffer is not None else _default_buffer(state, name)
    if not isinstance(array, np.ndarray) or array.size == 0:
        ctx.log(f"fault {record['id']}: {record['target']} has no buffer {name!r}; nothing flipped")
        return
    if not array.flags.writeable:
        raise ValueError(
            f"buffer {name!r} of {record['target']} is read-only; find_buffer must return a writable array"
        )
    element, bit = flip_bit(ctx, array, record["params"]["element"], record["params"]["bit"], record["id"])
    ctx.world.fabric["fault_hits"][record["id"]] += 1
    ctx.log(f"fault {record['id']}: flipped bit {bit} of element {element} of buffer {name!r}")


def _default_buffer(state: dict[str, Any], name: str) -> np.ndarray | None:
    buffers = state.get(BUFFERS_KEY)
    array = buffers.get(name) if isinstance(buffers, dict) else None
    if isinstance(array, np.ndarray) and not array.flags.writeable:
        array = buffers[name] = array.copy()  # type: ignore[index]
    return array if isinstance(array, np.ndarray) else None


# -- editing a live schedule ----------------------------------------------------------------------


def schedule_context(world: World) -> ScheduleContext:
    """What validating a record against this (installed) world needs."""
    fabric = world.fabric
    return ScheduleContext(
        world.nodes, fabric["ranks"], Topology.from_data(fabric["topology"]), fabric["buffers"]
    )


def add_fault(world: World, item: Mapping[str, Any]) -> dict[str, Any]:
    """Validate a record, give it the next id never issued (unless it has one), append it, queue its events.

    For branches and tools; the start must not be in the world's past. An id once issued is never
    issued again, even after its record was removed, so "f2" always means one fault.
    """
    fabric = world.fabric
    fault_id = item.get("id") or f"f{fabric['fault_id_max'] + 1}"
    if find_fault(world, fault_id) is not None:
        raise ConfigError(f"config key 'faults': fault id {fault_id} exists already")
    record = normalize_record(dict(item, id=fault_id), fault_id, schedule_context(world))
    if record["t_start"] < world.t_ns:
        raise ConfigError(f"config key 'faults': fault {fault_id} starts before now ({world.t_ns} ns)")
    world.faults.append(record)
    fabric["fault_id_max"] = max(fabric["fault_id_max"], fault_number(fault_id))
    fabric["fault_hits"][fault_id] = 0
    schedule_fault_events(world, record)
    return record


def remove_fault(world: World, fault_id: str) -> dict[str, Any]:
    """Remove a record; its pending events become no-ops and its active fabric effect ends now.

    What it already did to a node stays done: a crashed node stays down (no hook can run here),
    a flipped bit stays flipped. Raises KeyError for an unknown id.
    """
    record = find_fault(world, fault_id)
    if record is None:
        raise KeyError(f"no fault {fault_id!r} in the schedule")
    deactivate(world, fault_id)
    world.faults.remove(record)
    return record
