"""Swarm testing: each seed enables a random subset of fault kinds at random rates and draws the schedule at t=0.

Why subsets: when every fault kind is always on at one fixed rate, the faults crowd each other out,
and a bug that needs many drops and no crashes (or the reverse) is rarely reached. Turning kinds on
and off per seed reaches those corners (Groce et al., "Swarm Testing", ISSTA 2012; FoundationDB's
BUGGIFY and TigerBeetle's swarm options apply the same idea).

Why at t=0 and finite: the whole schedule is a list of records in ``world.faults`` before the first
event, so a user can read it (``timetravel faults``), a minimizer can remove records one by one,
and a branch can edit it. Nothing about faults is decided later behind the user's back, except the
per-message ``chance`` draws of a message fault, which are ordinary choices.

Every draw is a world-level choice (``choose_world``) at a ``fault.swarm.*`` site, in a fixed order,
so the same seed draws the same schedule and value 0 is always "less": a kind disabled, zero
records, the milder variant.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from timetravel.fabric.fault_kinds import BY_NAME, FAULT_KINDS, FaultKind
from timetravel.sim.choices import choose_world
from timetravel.sim.scenario import ConfigError
from timetravel.sim.world import World

WEIGHT_LEVELS = 4
"""An enabled kind's weight is 1, 2, 4 or 8: how often it is picked relative to the others."""
PER_MILLE = 1000


def swarm_kinds(text: str, restartable: bool) -> list[str]:
    """The kinds ``faults_kinds`` allows: ``all`` means every kind, one that needs a restart (crash)
    only if the scenario restarts nodes."""
    if text.strip() == "all":
        return [kind for kind in FAULT_KINDS if restartable or not BY_NAME[kind].needs_restart]
    kinds = [word.strip() for word in text.split(",") if word.strip()]
    for kind in kinds:
        if kind not in FAULT_KINDS:
            raise ConfigError(
                f"config key 'faults_kinds': unknown fault kind {kind!r} (kinds: {', '.join(FAULT_KINDS)}, or all)"
            )
    if not kinds:
        raise ConfigError("config key 'faults_kinds': name at least one fault kind, or all")
    return [kind for kind in FAULT_KINDS if kind in kinds]


def draw_swarm(
    world: World,
    ranks: Sequence[str],
    settings: Mapping[str, Any],
    *,
    restartable: bool,
    buffers: Sequence[str],
) -> list[dict[str, Any]]:
    """Draw this seed's schedule: raw records with ids f1..fn (schedule.normalize_record fills the rest)."""
    allowed = swarm_kinds(settings["faults_kinds"], restartable)
    enabled = [kind for kind in allowed if choose_world(world, "fault.swarm.enable", 2)]
    weights = [1 << choose_world(world, "fault.swarm.weight", WEIGHT_LEVELS) for _ in enabled]
    if not enabled or settings["faults_max"] == 0:
        return []
    count = choose_world(world, "fault.swarm.count", settings["faults_max"] + 1)
    window = settings["faults_window"]
    start = settings.get("faults_from", 0)
    return [
        _draw_record(world, number, _pick(world, enabled, weights), ranks, (start, window), buffers)
        for number in range(1, count + 1)
    ]


def _pick(world: World, kinds: list[str], weights: list[int]) -> str:
    value = choose_world(world, "fault.swarm.kind", sum(weights))
    for kind, weight in zip(kinds, weights, strict=True):
        if value < weight:
            return kind
        value -= weight
    raise AssertionError("weighted pick fell off the end")


def _level(world: World, site: str, levels: Sequence[Any]) -> Any:
    return levels[choose_world(world, site, len(levels))]


def _draw_record(
    world: World,
    number: int,
    kind: str,
    ranks: Sequence[str],
    span: tuple[int, int],
    buffers: Sequence[str],
) -> dict[str, Any]:
    """One record starting in ``[span[0], span[1])`` (``faults_from``, ``faults_window``)."""
    start, window = span
    target = ranks[choose_world(world, "fault.swarm.target", len(ranks))]
    t_start = start + choose_world(world, "fault.swarm.start", window - start)
    declared = BY_NAME[kind]
    low, high = declared.swarm_span
    low_ns = max(1, window * low // PER_MILLE)
    duration = low_ns + choose_world(
        world, "fault.swarm.duration", max(1, window * high // PER_MILLE - low_ns + 1)
    )
    params = _draw_params(world, declared, buffers)
    return {
        "id": f"f{number}",
        "kind": kind,
        "target": target,
        "t_start": t_start,
        "t_end": None if params.get("buffer") is not None else t_start + duration,
        "params": params,
    }


def _draw_params(world: World, declared: FaultKind, buffers: Sequence[str]) -> dict[str, Any]:
    """The parameters a swarm sets (the rest keep their defaults). A kind with a ``buffer``
    parameter flips a bit of one of the scenario's buffers half the time (a one-shot fault with no
    end), else of one message in flight."""
    if "buffer" in declared.params:
        site = f"fault.swarm.{declared.name}"
        if buffers and choose_world(world, f"{site}.where", 2) == 0:
            return {"buffer": _level(world, f"{site}.buffer", list(buffers))}
        return {"count": 1}
    return {level.param: _level(world, level.site, level.values) for level in declared.swarm_levels}
