"""Editing one fault of a live schedule: what a branch's ``--edit-fault f3:t_end=990ms`` does.

``add_fault`` and ``remove_fault`` (faults.py) add and remove whole records; a branch may also
change a record's fields in the middle of a run. What may change depends on where the fault is
at that moment, because what already happened stays happened:

* **not started** (its start event is still pending): any field but the id. The record is
  validated again like a new one, its pending events are taken off the queue and queued again
  at the new times.
* **active** (started, its end event still pending, or no end): ``t_end`` (not before now; null
  makes it last forever) and the parameters. The fault's effect on the fabric is undone and
  applied again from the new record, exactly as its start did: a message rule is rebuilt, a slow
  window recomputed. A crash stays a crash; a flip of a buffer bit happened at the start and is
  not redone, so a corrupt fault with a ``buffer`` takes no new parameters once started.
* **ended**: nothing (the record says what happened; drop it if it should not have).

Every refusal is a :class:`ConfigError` naming the fault and the field, like the schedule's own.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from typing import Any

from timetravel.fabric.fault_kinds import acts_once
from timetravel.fabric.faults import _activate_rule, apply_slow, deactivate, find_fault, schedule_context
from timetravel.fabric.schedule import FAULT_KIND, normalize_record, schedule_fault_events
from timetravel.sim.scenario import ConfigError
from timetravel.sim.world import World

FIXED_ONCE_STARTED = ("kind", "target", "t_start")
PHASE_PENDING = "pending"
PHASE_ACTIVE = "active"
PHASE_ENDED = "ended"


def pending_phases(world: World, fault_id: str) -> list[str]:
    """The phases (``start``, ``end``) of the fault's events still in the queue."""
    return [
        event.payload[1]
        for event in world.queue
        if event.kind == FAULT_KIND
        and isinstance(event.payload, (list, tuple))
        and len(event.payload) == 2
        and event.payload[0] == fault_id
    ]


def fault_phase(world: World, record: Mapping[str, Any]) -> str:
    """``pending`` (not started), ``active`` or ``ended``, from the events left in the queue."""
    phases = pending_phases(world, record["id"])
    if "start" in phases:
        return PHASE_PENDING
    if "end" in phases or record["t_end"] is None:
        return PHASE_ACTIVE
    return PHASE_ENDED


def unschedule(world: World, fault_id: str, phases: tuple[str, ...] = ("start", "end")) -> int:
    """Take the fault's pending events of these phases off the queue; returns how many."""
    kept = [
        event
        for event in world.queue
        if not (
            event.kind == FAULT_KIND
            and isinstance(event.payload, (list, tuple))
            and len(event.payload) == 2
            and event.payload[0] == fault_id
            and event.payload[1] in phases
        )
    ]
    removed = len(world.queue) - len(kept)
    if removed:
        world.queue[:] = kept
        heapq.heapify(world.queue)
    return removed


def edit_fault(world: World, fault_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
    """Change fields (``t_start``, ``t_end``, ``target``, ...) and parameters of one record.

    ``changes`` holds record fields and a ``params`` mapping of the parameters to change (the
    others keep their values). Returns the edited record (the same dict, changed in place, so
    the schedule keeps its order). See the module docstring for what may change when.
    """
    record = find_fault(world, fault_id)
    label = f"fault {fault_id}"
    if record is None:
        known = ", ".join(str(fault["id"]) for fault in world.faults) or "none"
        raise ConfigError(f"{label}: no such fault in the schedule (faults: {known})")
    if "id" in changes and changes["id"] != fault_id:
        raise ConfigError(f"{label}: the id of a fault cannot change")
    phase = fault_phase(world, record)
    if phase == PHASE_ENDED:
        raise ConfigError(f"{label}: it ended at {record['t_end']} ns, before the branch; drop it instead")
    item = {key: value for key, value in record.items() if key != "params"}
    item.update({key: value for key, value in changes.items() if key != "params"})
    item["params"] = {**record["params"], **dict(changes.get("params", {}))}
    edited = normalize_record(item, fault_id, schedule_context(world))
    if phase == PHASE_PENDING:
        _edit_pending(world, record, edited, label)
    else:
        _edit_active(world, record, edited, changes, label)
    return record


def _edit_pending(world: World, record: dict[str, Any], edited: dict[str, Any], label: str) -> None:
    if edited["t_start"] < world.t_ns:
        raise ConfigError(f"{label}: t_start ({edited['t_start']} ns) is before now ({world.t_ns} ns)")
    unschedule(world, record["id"])
    record.clear()
    record.update(edited)
    schedule_fault_events(world, record)


def _edit_active(
    world: World, record: dict[str, Any], edited: dict[str, Any], changes: Mapping[str, Any], label: str
) -> None:
    fixed = [key for key in FIXED_ONCE_STARTED if edited[key] != record[key]]
    if fixed:
        raise ConfigError(
            f"{label}: it started at {record['t_start']} ns; {fixed[0]} cannot change now (t_end and params can)"
        )
    if acts_once(record) and changes.get("params"):
        raise ConfigError(f"{label}: its bit flip happened at its start; its params cannot change now")
    if edited["t_end"] is not None and edited["t_end"] < world.t_ns:
        raise ConfigError(f"{label}: t_end ({edited['t_end']} ns) is before now ({world.t_ns} ns)")
    unschedule(world, record["id"], ("end",))
    deactivate(world, record["id"])
    record.clear()
    record.update(edited)
    _reactivate(world, record)
    if record["t_end"] is not None:
        world.schedule(record["t_end"], record["target"], FAULT_KIND, [record["id"], "end"])


def _reactivate(world: World, record: dict[str, Any]) -> None:
    """Apply an active fault's fabric effect again from its (edited) record, as its start did."""
    kind = record["kind"]
    fabric = world.fabric
    if kind == "slow":
        fabric["active_faults"][record["id"]] = [kind, record["target"]]
        apply_slow(world, record["target"])
    elif kind == "crash" or acts_once(record):
        return
    else:
        _activate_rule(fabric, record)
