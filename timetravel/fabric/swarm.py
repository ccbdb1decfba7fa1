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

from timetravel.fabric.schedule import FAULT_KINDS, MESSAGE_FAULT_KINDS
from timetravel.sim.choices import choose_world
from timetravel.sim.scenario import ConfigError
from timetravel.sim.world import World

WEIGHT_LEVELS = 4
"""An enabled kind's weight is 1, 2, 4 or 8: how often it is picked relative to the others."""
PROBABILITY_LEVELS = (0.01, 0.05, 0.2, 1.0)
DELAY_LEVELS_NS = (10_000, 100_000, 1_000_000)
REORDER_WINDOW_LEVELS_NS = (10_000, 100_000)
DUPLICATE_GAP_LEVELS_NS = (0, 1_000, 50_000)
BANDWIDTH_FACTOR_LEVELS = (0.5, 0.25, 0.1)
COMPUTE_FACTOR_LEVELS = (1.5, 2.0, 4.0)
PER_MILLE = 1000
DURATION_PER_MILLE: dict[str, tuple[int, int]] = {
    "partition": (1, 50),
    "slow": (20, 250),
    "crash": (1, 20),
    "corrupt": (5, 100),
    **dict.fromkeys(MESSAGE_FAULT_KINDS, (5, 100)),
}
"""How long each kind lasts, in thousandths of ``faults_window`` (a crash: its downtime)."""


def swarm_kinds(text: str, restartable: bool) -> list[str]:
    """The kinds ``faults_kinds`` allows: ``all`` means every kind, crash only if the scenario restarts nodes."""
    if text.strip() == "all":
        return [kind for kind in FAULT_KINDS if kind != "crash" or restartable]
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
    low, high = DURATION_PER_MILLE[kind]
    low_ns = max(1, window * low // PER_MILLE)
    duration = low_ns + choose_world(
        world, "fault.swarm.duration", max(1, window * high // PER_MILLE - low_ns + 1)
    )
    params = _draw_params(world, kind, buffers)
    one_shot = kind == "corrupt" and params.get("buffer") is not None
    return {
        "id": f"f{number}",
        "kind": kind,
        "target": target,
        "t_start": t_start,
        "t_end": None if one_shot else t_start + duration,
        "params": params,
    }


def _draw_params(world: World, kind: str, buffers: Sequence[str]) -> dict[str, Any]:
    if kind == "partition":
        return {
            "scope": _level(world, "fault.swarm.partition.scope", ("node", "host")),
            "direction": _level(world, "fault.swarm.partition.direction", ("both", "out", "in")),
            "mode": _level(world, "fault.swarm.partition.mode", ("hold", "drop")),
        }
    if kind == "slow":
        return {
            "bandwidth_factor": _level(world, "fault.swarm.slow.bandwidth", BANDWIDTH_FACTOR_LEVELS),
            "compute_factor": _level(world, "fault.swarm.slow.compute", COMPUTE_FACTOR_LEVELS),
        }
    if kind == "crash":
        return {}
    if kind == "corrupt":
        if buffers and choose_world(world, "fault.swarm.corrupt.where", 2) == 0:
            return {"buffer": _level(world, "fault.swarm.corrupt.buffer", list(buffers))}
        return {"count": 1}
    params: dict[str, Any] = {
        "probability": _level(world, f"fault.swarm.{kind}.probability", PROBABILITY_LEVELS)
    }
    if kind == "delay":
        params["delay_ns"] = _level(world, "fault.swarm.delay.delay", DELAY_LEVELS_NS)
    elif kind == "reorder":
        params["window_ns"] = _level(world, "fault.swarm.reorder.window", REORDER_WINDOW_LEVELS_NS)
    elif kind == "duplicate":
        params["gap_ns"] = _level(world, "fault.swarm.duplicate.gap", DUPLICATE_GAP_LEVELS_NS)
    return params
