"""The collective-level fabric: a collective is a rendezvous and one completion event per rank.

At the message level a ring all-reduce over N ranks is 2(N-1)·N chunk messages, one event each:
2.1 million events a step at 1,024 ranks. At the collective level the same collective costs one
completion event per rank: each rank *enters* (a call, no event), and when the last member has
entered, the collective's timing is computed here from the same topology and link tables the
message level uses, its numerics once by the scenario, and each rank hears of its completion at
the time the message pattern would have finished on it.

The timing of ring, tree and star collectives is :mod:`timetravel.fabric.collective_timing`.

**Faults** (:func:`fault_effects`): the message faults of the schedule whose window overlaps the
collective (from its first entry to its completion) are folded into it: a partition that separates members stalls the collective until it heals (never:
the collective hangs, and the scenario's watchdog reports it), a drop or an in-flight corruption
(caught by a checksum) costs the scenario's recovery time, a delay or reorder adds its time, a
duplicate changes nothing. Each is drawn once per collective at its usual site ``fault.<kind>``,
with the probability that at least one of the target's messages in the collective would have been
hit. Crashes are the scenario's business (a crashed rank does not enter; :func:`abandon`).

State lives in ``world.fabric["collectives"]`` (plain data): per open collective its members'
entry times and, once resolved, its result and how many completions are still to be delivered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from timetravel.fabric.fault_kinds import FOLDED_KINDS, acts_once
from timetravel.fabric.faults import prepare_rule
from timetravel.fabric.schedule import fault_site
from timetravel.fabric.topology import Topology

if TYPE_CHECKING:
    from timetravel.sim.context import Context
    from timetravel.sim.world import World

COLLECTIVES_KEY = "collectives"
OPEN_COLLECTIVES_MAX = 64
"""Collectives open at once (a job has one or two; more is a runaway bug, reported as such)."""


# -- the rendezvous -------------------------------------------------------------------------------


def open_collectives(world: World) -> dict[str, Any]:
    collectives = world.fabric.get(COLLECTIVES_KEY)
    if collectives is None:
        collectives = world.fabric[COLLECTIVES_KEY] = {}
    return collectives


def enter(ctx: Context, key: str, generation: int, step: int, members: int, index: int) -> dict[str, Any]:
    """Member ``index`` of ``members`` enters collective ``key`` now; returns its record.

    ``record["entered"] == members`` after the call means this was the last member: the caller
    resolves the collective then. Records of older generations (a restart abandoned them) are
    dropped on the way.
    """
    collectives = open_collectives(ctx.world)
    record = collectives.get(key)
    if record is None:
        for old in [name for name, item in collectives.items() if item["generation"] < generation]:
            del collectives[old]
        if len(collectives) >= OPEN_COLLECTIVES_MAX:
            raise AssertionError(f"more than {OPEN_COLLECTIVES_MAX} collectives open at once")
        record = collectives[key] = {
            "generation": generation,
            "step": step,
            "members": members,
            "entered": 0,
            "entered_ns": [-1] * members,
            "result": None,
            "remaining": members,
            "hung": None,
            "broken_ns": -1,
        }
    if record["entered_ns"][index] < 0:
        record["entered_ns"][index] = ctx.now
        record["entered"] += 1
    return record


def deliver_completions(ctx: Context, key: str, names: list[str], times: np.ndarray, kind: str) -> None:
    """One completion event per member, at its time (never before now)."""
    now = ctx.now
    for name, t_ns in zip(names, times.tolist(), strict=True):
        ctx.deliver(t_ns if t_ns > now else now, name, kind, key)


def take_result(world: World, key: str) -> Any:
    """A member heard its completion: the result (None when the collective broke), counted off."""
    collectives = open_collectives(world)
    record = collectives.get(key)
    if record is None or record["broken_ns"] >= 0:
        return None
    record["remaining"] -= 1
    if record["remaining"] <= 0:
        del collectives[key]
    return record["result"]


def abandon(world: World, now: int) -> None:
    """A member crashed: every open collective is broken; completions still to come are ignored."""
    for record in world.fabric.get(COLLECTIVES_KEY, {}).values():
        if record["broken_ns"] < 0:
            record["broken_ns"] = now


# -- faults ---------------------------------------------------------------------------------------


@dataclass
class Effects:
    """What the active message faults do to one collective."""

    delay_ns: int = 0
    hung: str | None = None
    """The id of a partition that never heals and separates the members: the collective hangs."""
    blocked_on: str | None = None
    corrupt: list[tuple[int, dict[str, Any]]] = field(default_factory=list)
    """``(member index, rule)`` for each in-flight corruption that hit the collective."""


def fault_effects(
    ctx: Context,
    kinds: tuple[str, ...],
    messages_per_member: int,
    recovery_ns: int,
    window: tuple[int, int],
) -> Effects:
    """Fold the message faults whose window overlaps the collective's ``window`` (first entry to
    completion) into one collective over every rank (module docstring)."""
    world = ctx.world
    fabric = world.fabric
    effects = Effects()
    first_ns, last_ns = window
    records = [
        record
        for record in world.faults
        if record["kind"] in FOLDED_KINDS
        and not acts_once(record)
        and record["t_start"] <= last_ns
        and (record["t_end"] is None or record["t_end"] >= first_ns)
    ]
    if not records:
        return effects
    topology = Topology.from_data(fabric["topology"])
    rank_of = fabric["rank_of"]
    ranks = len(fabric["ranks"])
    hits = fabric["fault_hits"]
    now = ctx.now
    for record in records:
        rule = prepare_rule(record, topology, fabric["ranks"])
        kind = rule["kind"]
        if kind == "partition":
            if rule["cut_links"] is not None or not _separates(rule, rank_of, ranks):
                continue
            hits[rule["id"]] = hits.get(rule["id"], 0) + 1
            heal_ns = rule["t_end_ns"]
            if heal_ns is None:
                effects.hung = rule["id"]
                effects.blocked_on = rule["target"]
                return effects
            stalled_ns = max(0, heal_ns - max(record["t_start"], now))
            effects.delay_ns += stalled_ns + (recovery_ns if rule["mode"] == "drop" else 0)
            continue
        if rule["target"] not in rank_of:
            continue
        wanted = rule["kinds"]
        if wanted is not None and not any(name in wanted for name in kinds):
            continue
        limit = rule["count"]
        if limit is not None and hits.get(rule["id"], 0) >= limit:
            continue
        probability = rule["probability"]
        at_least_once = 1.0 if probability >= 1.0 else 1.0 - (1.0 - probability) ** messages_per_member
        if not ctx.chance(fault_site(rule["id"], kind), at_least_once):  # keyed by the fault's own id
            continue
        hits[rule["id"]] = hits.get(rule["id"], 0) + 1
        if kind == "drop":
            effects.delay_ns += recovery_ns
        elif kind == "delay":
            effects.delay_ns += rule["delay_ns"]
        elif kind == "reorder":
            effects.delay_ns += ctx.choose(fault_site(rule["id"], "reorder.delay"), rule["window_ns"] + 1)
        elif kind == "corrupt":
            effects.corrupt.append((rank_of[rule["target"]], rule))
        ctx.log(f"fault {rule['id']}: {kind} on the collective through {rule['target']}")
    return effects


def _separates(rule: dict[str, Any], rank_of: dict[str, int], ranks: int) -> bool:
    """True when the partition's side holds some members but not all (of those it cuts off from)."""
    inside = sum(1 for name in rule["side"] if name in rank_of)
    if inside == 0:
        return False
    peers = rule["peers"]
    if peers is not None:
        return any(name in rank_of and name not in rule["side"] for name in peers)
    return inside < ranks
