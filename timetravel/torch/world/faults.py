"""Faults at the collective layer: removable records in ``world.faults``, as the fabric's are.

A record is ``{"id": "f1", "kind", "target": "r2", "t_start", "t_end", "params": {...}}`` (the fabric's
shape, so ``timetravel faults``, ``branch --drop-fault`` and the minimizer treat them alike). A fault
acts on the target rank while ``t_start <= t < t_end`` (``t_end`` null: for ever):

* ``slow`` — a straggler: the target's compute between two calls takes ``compute_factor`` times longer;
* ``delay`` — each collective the target enters reaches the reducer ``delay`` ns later (``count`` times);
* ``drop`` — the target's contribution to its next collective never arrives: that collective never
  completes (a hang, found by the ``hang`` detector);
* ``corrupt`` — one bit flips in the target's contribution (``side: contribution``, silent corruption
  that every rank then averages in) or in the result it receives (``side: result``: that replica drifts);
  ``op`` and ``numel_min`` narrow it to one collective op and to tensors of at least that many elements;
  the element and bit are choices keyed by the fault's own id (``fault.<id>.element``/``.bit``), so
  removing another fault never changes which bit this one flips;
* ``crash`` — the target process is killed at its next collective (the job fails with ``crash``);
* ``partition`` — collectives whose members span the target and others do not complete before
  ``t_end`` (null: never — a hang).

Each record counts what it did in ``world.fabric["fault_hits"][id]``.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from timetravel.sim.context import Context
from timetravel.sim.elided import summary_of
from timetravel.sim.scenario import ConfigError
from timetravel.torch.protocol import arrays

KINDS = ("slow", "delay", "drop", "corrupt", "crash", "partition")
DEFAULT_PARAMS: dict[str, dict[str, Any]] = {
    "slow": {"compute_factor": 10.0},
    "delay": {"delay": 1_000_000, "count": None},
    "drop": {"count": 1},
    "corrupt": {"side": "contribution", "op": None, "numel_min": 1, "element": None, "bit": None, "count": 1},
    "crash": {},
    "partition": {},
}


def parse_faults(spec: Any, ranks: int) -> list[dict[str, Any]]:
    """Check and normalize the ``faults`` setting (a JSON list); a bad record is a ConfigError naming it."""
    if spec in (None, "", "none"):
        return []
    if not isinstance(spec, list):
        raise ConfigError("config key 'faults': expected a JSON list of fault records")
    records = []
    for position, item in enumerate(spec):
        fault_id = item.get("id", f"f{position + 1}") if isinstance(item, dict) else f"f{position + 1}"
        label = f"fault {fault_id}"
        if not isinstance(item, dict):
            raise ConfigError(f"{label}: a fault record is a JSON object")
        kind = item.get("kind")
        if kind not in KINDS:
            raise ConfigError(
                f"{label}: kind must be one of {', '.join(KINDS)} at the collective layer, got {kind!r}"
            )
        target = item.get("target")
        if not (
            isinstance(target, str)
            and target.startswith("r")
            and target[1:].isdigit()
            and int(target[1:]) < ranks
        ):
            raise ConfigError(f"{label}: target must be a rank r0..r{ranks - 1}, got {target!r}")
        params = dict(DEFAULT_PARAMS[kind])
        unknown = sorted(set(item.get("params", {})) - set(params))
        if unknown:
            raise ConfigError(
                f"{label}: {kind} has no parameter {unknown[0]!r} (parameters: {', '.join(params) or 'none'})"
            )
        params.update(item.get("params", {}))
        t_start, t_end = item.get("t_start", 0), item.get("t_end")
        if (
            type(t_start) is not int
            or t_start < 0
            or (t_end is not None and (type(t_end) is not int or t_end <= t_start))
        ):
            raise ConfigError(f"{label}: t_start must be an int of ns >= 0 and t_end null or after it")
        records.append(
            {
                "id": str(fault_id),
                "kind": kind,
                "target": target,
                "t_start": t_start,
                "t_end": t_end,
                "params": params,
            }
        )
    return records


def active(ctx: Context, kind: str, rank: int) -> list[dict[str, Any]]:
    """The faults of ``kind`` acting on rank ``rank`` now (in schedule order), with hits left."""
    node = f"r{rank}"
    now = ctx.now
    found = []
    for record in ctx.world.faults:
        if record["kind"] != kind or record["target"] != node or now < record["t_start"]:
            continue
        if record["t_end"] is not None and now >= record["t_end"]:
            continue
        count = record["params"].get("count")
        if count is not None and hits(ctx, record["id"]) >= count:
            continue
        found.append(record)
    return found


def hits(ctx: Context, fault_id: str) -> int:
    return int(ctx.world.fabric.get("fault_hits", {}).get(fault_id, 0))


def hit(ctx: Context, record: dict[str, Any], what: str) -> None:
    counts = ctx.world.fabric.setdefault("fault_hits", {})
    counts[record["id"]] = counts.get(record["id"], 0) + 1
    ctx.log(f"fault {record['id']} ({record['kind']}) on {record['target']}: {what}")


DRY_MARK = "silent_reference"
"""A run whose ``c10d`` node carries this mark is silent_corruption's reference (world/silent.py): its
``corrupt`` faults fire as they did in the run — same collective, same element and bit choices, same
hit counts and log lines — but write nothing, so the two runs keep one schedule and differ only in
the data the faults changed."""


def flip_one_bit(ctx: Context, record: dict[str, Any], array: Any) -> tuple[Any, str]:
    """A copy of ``array`` with one bit flipped; the element and bit are choices keyed by the fault
    id. The flip itself is computed by the run's host (journaled when recorded: world/journal.py).
    In silent_corruption's reference run (``DRY_MARK`` on the ``c10d`` node whose handler applies it)
    the same choices are drawn and ``array`` comes back unchanged."""
    if array.size == 0:
        return np.array(array, copy=True), "nothing to flip (empty tensor)"
    dry = bool(ctx.state.get(DRY_MARK))
    params = record["params"]
    element = (
        params["element"]
        if params["element"] is not None
        else ctx.choose(f"fault.{record['id']}.element", array.size)
    )
    bits = array.dtype.itemsize * 8
    bit = params["bit"] if params["bit"] is not None else ctx.choose(f"fault.{record['id']}.bit", bits)
    element %= array.size
    bit %= bits
    if dry:
        before = ctx.processes.computed(ctx.event, functools.partial(arrays.element_repr, array, element))
        return array, f"element {element} bit {bit}: {before} kept (the fault writes nothing in this run)"
    flip = functools.partial(arrays.flipped, array, element, bit)
    copy, before, after = ctx.processes.computed(ctx.event, flip)
    return copy, f"element {element} bit {bit}: {before} -> {after}"


def corrupts(record: dict[str, Any], side: str, op: str, tensors: list[Any]) -> bool:
    """Whether a corrupt record applies to this side of this call (its op and tensor-size filters)."""
    params = record["params"]
    if params["side"] != side or not tensors or params["op"] not in (None, op):
        return False
    return bool(tensors[0].size >= params["numel_min"])


def at_entry(ctx: Context, entry: dict[str, Any]) -> tuple[str, dict[str, Any] | None]:
    """Apply the faults acting on this rank's entry now, in kind order: ``crash`` (its process is
    killed: ``("crashed", record)``), ``drop`` (it never arrives: ``("dropped", record)``), ``delay``
    (``entry['t_ns']`` later) and ``corrupt`` of its contribution (one bit of ``entry['inputs'][0]``);
    ``("arrives", None)`` otherwise."""
    rank = entry["rank"]
    for record in active(ctx, "crash", rank):
        hit(ctx, record, f"killed at {entry['op']}")
        return "crashed", record
    for record in active(ctx, "drop", rank):
        hit(ctx, record, f"{entry['op']} contribution dropped")
        return "dropped", record
    for record in active(ctx, "delay", rank):
        hit(ctx, record, f"{entry['op']} delayed {record['params']['delay']} ns")
        entry["t_ns"] += int(record["params"]["delay"])
    for record in active(ctx, "corrupt", rank):
        if not corrupts(record, "contribution", entry["op"], entry["inputs"]):
            continue
        entry["inputs"][0], what = flip_one_bit(ctx, record, entry["inputs"][0])
        entry["summary"][0] = list(summary_of(entry["inputs"][0]))
        hit(ctx, record, f"{entry['op']} contribution: {what}")
    return "arrives", None


def at_completion(
    ctx: Context,
    members: list[int] | None,
    entries: list[dict[str, Any]],
    received: list[list[np.ndarray]] | None,
) -> tuple[int | bool | None, list[list[np.ndarray]] | None]:
    """At a collective's completion: whether a partition holds it (``members``; None for a send/recv
    pair, which no partition holds) — False: none, an int: held until then, None: for ever — and
    each entry's ``received`` outputs after the ``corrupt`` faults on the result side of its rank."""
    heal = partition_heals_at(ctx, members) if members is not None else False
    if heal is None or received is None:
        return heal, received
    corrupted = []
    for entry, outputs in zip(entries, received, strict=True):
        for record in active(ctx, "corrupt", entry["rank"]):
            if corrupts(record, "result", entry["op"], outputs):
                outputs = list(outputs)
                outputs[0], what = flip_one_bit(ctx, record, outputs[0])
                hit(ctx, record, f"{entry['op']} result: {what}")
        corrupted.append(outputs)
    return heal, corrupted


def partition_heals_at(ctx: Context, members: list[int]) -> int | bool | None:
    """False if no partition splits ``members`` now; else the heal time (None: never)."""
    for record in ctx.world.faults:
        if record["kind"] != "partition" or ctx.now < record["t_start"]:
            continue
        if record["t_end"] is not None and ctx.now >= record["t_end"]:
            continue
        target = int(record["target"][1:])
        if target in members and len(members) > 1:
            hit(ctx, record, f"collective over {len(members)} ranks held until the partition heals")
            return record["t_end"]
    return False
