"""Per rank, its last collective: digests of what it fed in and got out, and their non-finite counts.

Coordinator side, plain data in the ``c10d`` node's own state (a handler changes only the node an
event was delivered to), so a search over a recording can ask where a NaN *entered* rather than where
the parameters became NaN (which, after an all_reduce, is every replica at the same step)::

    find-first nodes/c10d/last/*/in_nonfinite > 0           # the rank and collective that fed it
    find-first nodes/c10d/last/*/in_nonfinite_total > 0     # the same, monotone (bisect is exact)

``last[rank]`` holds ``key`` (``<group>#<seq>``, or the ``p2p:…`` key of a send/recv), ``op``,
``seq``, ``group``, ``t_ns`` (entry), ``in_digest`` / ``out_digest`` (xxh3-64 hex, one per tensor,
of the tensors' bytes in C order: the entry after any entry fault, the result after any result
fault), ``in_nonfinite`` / ``out_nonfinite`` (NaN or Inf elements over all tensors), ``count`` (the
rank's collectives so far) and the running totals ``in_nonfinite_total`` / ``out_nonfinite_total``.
``first_nonfinite`` is the first entry whose input held a non-finite value (rank, key, op, t_ns).

A one-element all_reduce is also a metric (:func:`_scalar_metric`): ``allreduce/<group>/<k>``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from timetravel.sim.context import Context
from timetravel.sim.elided import summary_of
from timetravel.torch.protocol import arrays
from timetravel.torch.world import replicas, resume


def tensor_digests(tensors: list[Any]) -> list[str]:
    """xxh3-64 of each tensor's bytes (C order), as the rank's step digests are."""
    return [summary_of(array)[0] for array in tensors]


def reaches_a_result(entry: dict[str, Any]) -> bool:
    """Whether the rank's inputs can reach any rank's result: not a broadcast's from a rank other than
    its root (a receive buffer, often ``torch.empty``: NaN under deterministic algorithms)."""
    return entry["op"] != "broadcast" or entry["opts"].get("root") == entry["index"]


def note_entry(
    state: dict[str, Any], entry: dict[str, Any], key: str, group: Any, seq: Any
) -> list[tuple[int, int]]:
    """A rank entered collective ``key`` with ``entry['inputs']`` (``entry['summary']``: each one's
    digest and non-finite count): its last-collective record starts. Returns (tensor position,
    non-finite count) of each input that reaches a result and holds one."""
    rank = str(entry["rank"])
    last = state.setdefault("last", {})
    previous = last.get(rank, {})
    counts = (
        [(position, int(count)) for position, (_digest, count) in enumerate(entry["summary"]) if count]
        if reaches_a_result(entry)
        else []
    )
    in_nonfinite = sum(count for _, count in counts)
    if counts:  # the nan detector reads it once every member entered (only where there is one)
        entry["nonfinite"] = _first_nonfinite_tensor(entry["inputs"], counts)
    last[rank] = {
        "key": key,
        "id": entry["id"],
        "op": entry["op"],
        "seq": seq,
        "group": group,
        "t_ns": entry["t_ns"],
        "in_digest": [digest for digest, _count in entry["summary"]],
        "in_nonfinite": in_nonfinite,
        "out_digest": [],
        "out_nonfinite": 0,
        "state": "entered",
        "count": previous.get("count", 0) + 1,
        "in_nonfinite_total": previous.get("in_nonfinite_total", 0) + in_nonfinite,
        "out_nonfinite_total": previous.get("out_nonfinite_total", 0),
    }
    if in_nonfinite and "first_nonfinite" not in state:
        state["first_nonfinite"] = {
            "rank": f"r{rank}",
            "key": key,
            "op": entry["op"],
            "t_ns": entry["t_ns"],
            "count": in_nonfinite,
        }
    return counts


def _first_nonfinite_tensor(tensors: list[np.ndarray], counts: list[tuple[int, int]]) -> dict[str, Any]:
    """Where an entry's non-finite values are: their count, and the first tensor holding any."""
    position = counts[0][0]
    array = tensors[position]
    total = sum(count for _, count in counts)
    return {"count": total, "tensor": position, "dtype": str(array.dtype), "shape": list(array.shape)}


def fail_nonfinite(entries: list[dict[str, Any]], key: str, group: Any, seq: Any, ctx: Context) -> None:
    """The ``nan`` detector: these entries of collective ``key`` (every member that entered it) hold
    non-finite values. Every such rank is named, in rank order, and the lowest is the failure's
    node, so the rank named does not depend on which one arrived first (the seed's arrival order).
    ``step`` is the optimizer step in progress on that rank (1 for the first)."""
    fed = sorted((entry for entry in entries if "nonfinite" in entry), key=lambda entry: int(entry["rank"]))
    assert fed, "a nan failure names at least one rank that fed non-finite values"
    first = fed[0]
    where = f"{first['op']} #{seq} of group {group}"
    parts = [
        f"r{entry['rank']} {entry['nonfinite']['count']} in tensor {entry['nonfinite']['tensor']} "
        f"({entry['nonfinite']['dtype']}{entry['nonfinite']['shape']})"
        for entry in fed
    ]
    if len(fed) == 1:
        info = first["nonfinite"]
        message = (
            f"r{first['rank']} fed {info['count']} non-finite value(s) into {where} "
            f"(tensor {info['tensor']}, {info['dtype']}{info['shape']})"
        )
    else:
        names = ", ".join(f"r{entry['rank']}" for entry in fed[:-1]) + f" and r{fed[-1]['rank']}"
        message = f"{names} fed non-finite values into {where}: {', '.join(parts)}"
    ctx.fail("nan", message, "torch.collective.nonfinite", node=f"r{first['rank']}")
    ctx.world.failures[-1].update(
        step=replicas.steps_completed(ctx.world.nodes["c10d"], int(first["rank"])) + 1,
        op=first["op"],
        seq=seq,
        group=group,
        collective=key,
        tensor=first["nonfinite"]["tensor"],
        ranks=[f"r{entry['rank']}" for entry in fed],
        nonfinite={f"r{entry['rank']}": entry["nonfinite"]["count"] for entry in fed},
    )


def note_results(
    state: dict[str, Any],
    entries: list[dict[str, Any]],
    received: list[list[Any]],
    t_done: int,
    ctx: Context,
) -> list[list[str]]:
    """A collective completed at ``t_done``: each entry's rank receives its ``received`` outputs.
    An output that is an entry's input (a broadcast, a gather, a recv) has that input's summary.
    Returns each entry's output digests."""
    known = {
        id(array): summary
        for entry in entries
        for array, summary in zip(entry["inputs"], entry.get("summary", ()), strict=False)
    }
    digests = []
    for entry, outputs in zip(entries, received, strict=True):
        summaries = []
        for array in outputs:  # an all_reduce hands every rank the same array: summarized once
            summary = known.get(id(array))
            if summary is None:
                summary = known[id(array)] = list(summary_of(array))
            summaries.append(summary)
        note_result(state, entry, outputs, summaries, t_done, ctx)
        digests.append([digest for digest, _count in summaries])
    return digests


def note_result(
    state: dict[str, Any],
    entry: dict[str, Any],
    outputs: list[Any],
    summaries: list[Any],
    t_done: int,
    ctx: Context,
) -> None:
    """The rank's collective completed with ``outputs`` (what it receives; ``summaries``: each one's
    digest and non-finite count) at ``t_done``."""
    record = state.get("last", {}).get(str(entry["rank"]))
    if record is None:
        return
    if entry["op"] == "all_reduce" and entry.get("index") == 0 and len(outputs) == 1 and outputs[0].size == 1:
        _scalar_metric(state, entry, record, outputs[0], ctx)
    out_nonfinite = sum(count for _digest, count in summaries)
    record["out_nonfinite_total"] += out_nonfinite
    if record["id"] != entry["id"]:
        return  # the rank entered a later collective already (async work): its record is that one's
    record.update(
        out_digest=[digest for digest, _count in summaries],
        out_nonfinite=out_nonfinite,
        state="completed",
        t_done_ns=t_done,
    )


def _scalar_metric(
    state: dict[str, Any], entry: dict[str, Any], record: dict[str, Any], output: np.ndarray, ctx: Context
) -> None:
    """A one-element all_reduce (a loss or an accuracy the script averages) as the metric
    ``allreduce/<group>/<k>``: the k-th such all_reduce of the group since the group's first member's
    last optimizer step, so the same call site gets the same name at every step. Its value is the
    result every rank receives (for SUM: the sum over ranks)."""
    if record["id"] != entry["id"] or (
        output.dtype.kind not in "fiub" and output.dtype != arrays.DTYPES["bfloat16"]
    ):
        return
    counters = state.setdefault("scalar_reduces", {})
    rank = str(entry["rank"])
    group = str(record["group"])
    per_rank = counters.setdefault(rank, {})
    index = per_rank.get(group, 0)
    per_rank[group] = index + 1
    value = float(output.reshape(-1)[0])
    ctx.metric(f"allreduce/{group}/{index}", value)
    resume.note_loss(state, rank, index, value, ctx)


def step_done(state: dict[str, Any], rank: Any) -> None:
    """A rank's optimizer step: its scalar all_reduces count from 0 again."""
    state.get("scalar_reduces", {}).pop(str(rank), None)


def _first_digest_change(
    world_a: Any, world_b: Any, changes: tuple[dict[str, Any], ...]
) -> tuple[str, str, str, dict[str, Any], dict[str, Any] | None] | None:
    """The first change among ``changes`` to a rank's last-collective digests: (rank, field, tensor,
    the record on side a, or b when a has none; the record on side b), None when no digest changed."""
    for change in changes:
        parts = str(change.get("path", "")).split("/")
        if parts[:3] != ["nodes", "c10d", "last"] or len(parts) < 5:
            continue
        rank, field = parts[3], parts[4]
        record_b = world_b.nodes["c10d"].get("last", {}).get(rank)
        record = world_a.nodes["c10d"].get("last", {}).get(rank) or record_b
        if not record:
            continue
        tensor = parts[5] if len(parts) > 5 and parts[5].isdigit() else ""
        return rank, field, tensor, record, record_b
    return None


def describe_divergence(world_a: Any, world_b: Any, changes: tuple[dict[str, Any], ...]) -> str | None:
    """The first divergence in a torch user's terms: the collective whose bits differ, on which rank,
    which tensor (from the per-rank digests above; None when no digest is among the changes)."""
    found = _first_digest_change(world_a, world_b, changes)
    if found is None:
        return None
    rank, field, tensor, record, _record_b = found
    side = "output" if field.startswith("out") else "input"
    which = f", {side} tensor {tensor}" if tensor else ""
    return (
        f"the first collective whose {side}s differ: {record['op']} {record['key']} "
        f"(group {record['group']}, seq {record['seq']}) on r{rank}{which}"
    )


def divergence_t_ns(world_a: Any, world_b: Any, changes: tuple[dict[str, Any], ...]) -> int | None:
    """When the first divergence happened in a torch user's terms: the completion time (``t_done``)
    of the first collective whose digests differ, not the time of the event that completed it (the
    last member's entry: the result arrives a modelled transfer later). The earlier of the two
    sides' completion times when both completed it; None when it has not completed (its inputs
    differ and members are still missing) or no digest is among the changes."""
    found = _first_digest_change(world_a, world_b, changes)
    if found is None:
        return None
    _rank, _field, _tensor, record, record_b = found
    key = record["key"]
    times = [
        int(item["t_done_ns"])
        for item in (record, record_b)
        if item and item.get("key") == key and item.get("state") == "completed" and "t_done_ns" in item
    ]
    return min(times) if times else None
