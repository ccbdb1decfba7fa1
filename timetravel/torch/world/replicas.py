"""The ``divergence`` detector: replicas that must agree and do not (coordinator side, plain data).

Two places where data-parallel ranks must hold the same bits:

* **what they receive from a collective whose members all get the same result** — an all_reduce (DDP's
  gradients after reduction, a loss averaged for logging), a broadcast (replicated parameters or buffers
  sent from one rank), an all_gather. :func:`check_received` compares each member's received digests as
  the collective completes, so a result that reached one rank with a flipped bit is reported at that
  collective, in the optimizer step it happened in, with the output tensor and the first element it
  hit — before the update spreads it over the parameters, and also when rounding hides it there (a
  flip in a low bit of a gradient may leave the weights equal and change only the momentum);
* **their parameters after every optimizer step** — :func:`check_step` compares the digests each rank
  reports by name (a global step hook), which catches what no collective shows: a rank that skipped
  an update, applied another learning rate, or computed its gradient from other weights.

What ranks *feed* into a collective differs by design (each its own gradient; a broadcast's non-root
inputs are discarded), so inputs are not compared: a flip in a contribution reaches every member alike
and no replica comparison can see it — that is ``silent_corruption``'s job (world/silent.py).

A split with a strict majority names the others as the ``minority`` (``node`` is its lowest rank);
without one (two ranks, 2 against 2) nothing says which side is wrong: ``minority`` is empty, ``split``
lists every side (ordered by lowest rank) and ``node`` is the lowest rank that disagrees with the lowest
rank (r1 of two).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from timetravel.sim.context import Context

AGREEING_OPS = ("all_reduce", "broadcast", "all_gather")
"""Collectives whose members all receive the same outputs (a reduce, gather, scatter, reduce_scatter or
all_to_all hands each member its own part)."""
SITE = "torch.collective.divergence"


def steps_completed(state: dict[str, Any], rank: int) -> int:
    """Optimizer steps ``rank`` completed, from the ``c10d`` node's ``state``: every rank's
    (``steps_checked``) or a later one it reported while a peer had not yet (pending step reports)."""
    reported = [int(step) for step, reports in state.get("steps", {}).items() if str(rank) in reports]
    return max([int(state.get("steps_checked", 0)), *reported])


def check_received(
    state: dict[str, Any],
    entries: list[dict[str, Any]],
    received: list[list[np.ndarray]],
    digests: list[list[str]],
    key: str,
    ctx: Context,
) -> bool:
    """A collective ``key`` completed; each entry's rank received ``received`` (digests ``digests``).
    Fails ``divergence`` and returns True when members of an agreeing collective received different
    bits."""
    if not entries or entries[0]["op"] not in AGREEING_OPS or len(entries) < 2:
        return False
    groups: dict[str, list[int]] = {}
    for position, rank_digests in enumerate(digests):
        groups.setdefault("|".join(rank_digests), []).append(position)
    if len(groups) == 1:
        return False
    sides = sorted(groups.values(), key=lambda positions: int(entries[positions[0]]["rank"]))
    majority = _majority(sides)
    usual = (majority or sides[0])[0]
    odd = next(side for side in sides if side is not majority and usual not in side)[0]
    # over the tensors' bytes: by the run's host (journaled when recorded: world/journal.py)
    tensor, element = ctx.processes.computed(
        ctx.event, functools.partial(_first_difference, received[odd], received[usual])
    )
    array = received[odd][tensor] if tensor < len(received[odd]) else received[usual][tensor]
    rank = int(entries[odd]["rank"])
    step = steps_completed(state, rank) + 1
    group, _, seq = key.rpartition("#")
    what = f"{entries[0]['op']} {key} (group {group}, seq {seq})"
    described = f"output tensor {tensor} ({array.dtype}{list(array.shape)}), first at element {element}"
    named = [[f"r{entries[position]['rank']}" for position in side] for side in sides]
    minority, majority_size, node = _verdict(named)
    if majority_size is not None:
        message = (
            f"in optimizer step {step}, {', '.join(minority)} received another result from {what} than "
            f"the other {majority_size} members: {described}"
        )
    else:
        message = (
            f"in optimizer step {step}, the members of {what} received different results with no majority: "
            f"{_sides_text(named)}: {described}"
        )
    ctx.fail("divergence", message, SITE, node=node)
    ctx.world.failures[-1].update(
        step=step,
        tensor=f"output {tensor} of {entries[0]['op']} {key}",
        collective=key,
        output=tensor,
        element=element,
        minority=minority,
        split=named,
    )
    return True


def _majority(sides: list[list[Any]]) -> list[Any] | None:
    largest = max(len(side) for side in sides)
    leaders = [side for side in sides if len(side) == largest]
    return leaders[0] if len(leaders) == 1 else None


def _first_difference(mine: list[np.ndarray], theirs: list[np.ndarray]) -> list[int]:
    """The first output tensor whose bytes differ and its first differing element (flat, C order)."""
    for position, (array, other) in enumerate(zip(mine, theirs, strict=False)):
        if array.shape != other.shape or array.dtype != other.dtype:
            return [position, 0]
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        other_raw = np.ascontiguousarray(other).reshape(-1).view(np.uint8)
        differs = np.flatnonzero(raw != other_raw)
        if differs.size:
            return [position, int(differs[0]) // max(array.dtype.itemsize, 1)]
    return [min(len(mine), len(theirs)), 0]


def check_step(step: str, reports: dict[str, list[Any]], ctx: Context) -> None:
    """Every live rank reported its parameter digests after optimizer ``step``: replicas must agree."""
    ranks = sorted(reports, key=int)
    layouts = {repr([(name, shape, dtype) for name, shape, dtype, _ in reports[rank]]) for rank in ranks}
    if len(layouts) != 1:
        return  # not replicas (sharded or different models): nothing to compare
    reference = reports[ranks[0]]
    for position, (name, shape, dtype, _) in enumerate(reference):
        groups: dict[str, list[str]] = {}
        for rank in ranks:
            groups.setdefault(reports[rank][position][3], []).append(rank)
        if len(groups) == 1:
            continue
        _fail_step(step, f"{name} ({dtype}{shape})", name, list(groups.values()), ctx)
        return


def _fail_step(step: str, described: str, name: str, groups: list[list[str]], ctx: Context) -> None:
    """Replicas split into ``groups`` (each in rank order) on parameter ``name`` after ``step``."""
    named = [
        [f"r{rank}" for rank in members] for members in sorted(groups, key=lambda members: int(members[0]))
    ]
    minority, majority_size, node = _verdict(named)
    if majority_size is not None:
        message = (
            f"after optimizer step {step}, parameter {described} differs on {', '.join(minority)} from the "
            f"other {majority_size} replicas"
        )
    else:
        message = (
            f"after optimizer step {step}, parameter {described} differs between replicas with no "
            f"majority: {_sides_text(named)}"
        )
    ctx.fail("divergence", message, SITE, node=node)
    ctx.world.failures[-1].update(step=int(step), tensor=name, minority=minority, split=named)


def _verdict(named: list[list[str]]) -> tuple[list[str], int | None, str]:
    """Sides of rank names (ordered by their lowest rank) -> the minority (in rank order), the
    majority's size and the rank to look at; without a strict majority: no minority, None, and by
    convention the lowest rank that disagrees with the lowest rank."""
    majority = _majority(named)
    if majority is None:
        return [], None, named[1][0]
    minority = sorted(
        (name for side in named if side is not majority for name in side), key=lambda name: int(name[1:])
    )
    return minority, len(majority), minority[0]


def _sides_text(named: list[list[str]]) -> str:
    return " against ".join("{" + ", ".join(side) + "}" for side in named)
