"""Tree all-reduce: reduce up a binary tree of depth floor(log2 N), then broadcast down it.

Ranks form a binary heap: rank r's parent is (r - 1) // 2 and its children 2r+1 (left) and 2r+2
(right). The bucket is cut into chunks of at most ``tree_chunk_bytes``; each chunk travels on its
own, so a deep tree pipelines them as NCCL's tree does. A rank sends a chunk's subtree sum up as
soon as it has its own contribution and both children's sums for that chunk; the root then holds
the total and sends it down, and every rank forwards what it receives to its children.

``reduce_order`` decides the bits:

* canonical: a rank keeps its children's sums and adds ``(own + left) + right``, whatever arrived
  first, so the result is the same on every seed (:func:`canonical_sum` computes it directly);
* arrival: a rank adds each contribution into a running sum as it arrives, as a naive
  implementation would; floating-point addition is not associative, so the bits follow the timing.

Rank state keys owned here: ``tree_parent``, ``tree_children`` (fixed at build), and per collective
``tree_left``/``tree_right`` (children's sums per chunk, canonical), ``tree_acc`` (running sums,
arrival), ``tree_got`` (children heard per chunk), ``tree_up_done`` (chunks sent up), ``tree_down_got`` and
``tree_down_done`` (chunks received coming down).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from timetravel.scenarios.dp_training import collective, reliability
from timetravel.scenarios.dp_training.collective import DATA, PART
from timetravel.sim import Context

UP = "tree_up"
DOWN = "tree_down"
LEFT = 0
RIGHT = 1


def parent_of(index: int) -> int | None:
    return (index - 1) // 2 if index > 0 else None


def children_of(index: int, ranks: int) -> list[int]:
    return [child for child in (2 * index + 1, 2 * index + 2) if child < ranks]


def depth(ranks: int) -> int:
    """Edges from the deepest leaf to the root."""
    return (ranks).bit_length() - 1


@functools.lru_cache(maxsize=64)
def chunk_bounds(elements: int, itemsize: int, chunk_bytes: int) -> tuple[int, ...]:
    """Boundaries of the pipelined chunks: as many chunks of at most ``chunk_bytes`` as needed."""
    per_chunk = max(1, chunk_bytes // itemsize)
    chunks = max(1, -(-elements // per_chunk))
    return tuple(elements * chunk // chunks for chunk in range(chunks + 1))


def canonical_sum(contributions: np.ndarray) -> np.ndarray:
    """The canonical tree sum of a ranks x elements stack: ``(own + left) + right`` bottom up."""
    ranks = contributions.shape[0]
    sums = contributions.copy()
    for level in range(depth(ranks) - 1, -1, -1):
        first = (1 << level) - 1
        _add_children(sums, first, min(ranks, 2 * first + 1), ranks, 1)
        _add_children(sums, first, min(ranks, 2 * first + 1), ranks, 2)
    return sums[0].copy()


def _add_children(sums: np.ndarray, first: int, end: int, ranks: int, side: int) -> None:
    """``sums[n] += sums[2n + side]`` for the nodes ``n`` in ``[first, end)`` that have that child.

    The nodes with such a child are a prefix of the level (``2n + side < ranks``) and their
    children every other row from ``2 first + side``: so both are slices, the additions the same
    ones, element by element, as a gather and a scatter by index would make, without the copies
    (at 10,000 ranks the sum of every step is 14 levels of them)."""
    last = min(end, (ranks - side + 1) // 2)
    if last > first:
        sums[first:last] += sums[2 * first + side : 2 * last + side - 1 : 2]


def arrival_sum(contributions: np.ndarray, right_first: list[bool]) -> np.ndarray:
    """The tree's arrival-order sum: a node adds its children's sums in the order they arrived.

    ``right_first[r]`` says r heard its right child first: its sum is then ``(own + right) +
    left`` instead of ``(own + left) + right``, exactly the additions the messages make.
    """
    ranks = contributions.shape[0]
    sums = contributions.copy()
    flipped = np.asarray(right_first, dtype=bool)
    for level in range(depth(ranks) - 1, -1, -1):
        first = (1 << level) - 1
        nodes = np.arange(first, min(ranks, 2 * first + 1))
        both = nodes[2 * nodes + 2 < ranks]
        swap = both[flipped[both]]
        keep = nodes[(2 * nodes + 1 < ranks)]
        keep = keep[~np.isin(keep, swap)]
        sums[keep] = sums[keep] + sums[2 * keep + 1]
        right = keep[2 * keep + 2 < ranks]
        sums[right] = sums[right] + sums[2 * right + 2]
        sums[swap] = sums[swap] + sums[2 * swap + 2]
        sums[swap] = sums[swap] + sums[2 * swap + 1]
    return sums[0].copy()


def _bounds(state: dict[str, Any], ctx: Context) -> tuple[int, ...]:
    contribution = state["contribution"] if state["contribution"] is not None else state["result"]
    return chunk_bounds(contribution.shape[0], contribution.itemsize, ctx.world.config["tree_chunk_bytes"])


def start(state: dict[str, Any], ctx: Context) -> None:
    contribution = state["contribution"]
    bounds = _bounds(state, ctx)
    chunks = len(bounds) - 1
    arrival = ctx.world.config["reduce_order"] == "arrival"
    state["result"] = np.zeros_like(contribution)
    state["tree_got"] = [0] * chunks
    state["tree_left"] = [None] * chunks
    state["tree_right"] = [None] * chunks
    state["tree_acc"] = (
        [contribution[bounds[c] : bounds[c + 1]].copy() for c in range(chunks)] if arrival else []
    )
    state["tree_up_done"] = 0
    state["tree_down_got"] = [False] * chunks
    state["tree_down_done"] = 0
    if not state["tree_children"]:
        for chunk in range(chunks):
            _chunk_reduced(state, ctx, chunk, contribution[bounds[chunk] : bounds[chunk + 1]].copy())
    if state["inbox"]:
        collective.drain(state, ctx, (UP, DOWN), _process, _sender)


def _sender(_kind: str, _message: list[Any]) -> str:
    return "a tree neighbour"


def _process(state: dict[str, Any], ctx: Context, kind: str, message: list[Any]) -> None:
    state["coll_heard_ns"] = ctx.now
    if kind == DOWN:
        _received_down(state, ctx, message[PART], message[DATA])
        return
    chunk, side = divmod(message[PART], 2)
    got = state["tree_got"]
    slots = state["tree_left"] if side == LEFT else state["tree_right"]
    if slots[chunk] is not None:
        return
    if state["tree_acc"]:
        slots[chunk] = True
        state["tree_acc"][chunk] = state["tree_acc"][chunk] + message[DATA]
    else:
        slots[chunk] = message[DATA]
    got[chunk] += 1
    if got[chunk] == len(state["tree_children"]):
        _chunk_reduced(state, ctx, chunk, _subtree_sum(state, ctx, chunk))


def _subtree_sum(state: dict[str, Any], ctx: Context, chunk: int) -> np.ndarray:
    if state["tree_acc"]:
        return state["tree_acc"][chunk]
    bounds = _bounds(state, ctx)
    total = state["contribution"][bounds[chunk] : bounds[chunk + 1]] + state["tree_left"][chunk]
    if state["tree_right"][chunk] is not None:
        total = total + state["tree_right"][chunk]
    return total


def _chunk_reduced(state: dict[str, Any], ctx: Context, chunk: int, total: np.ndarray) -> None:
    """This rank's subtree sum of ``chunk`` is complete: send it up, or (root) start the broadcast."""
    state["tree_up_done"] += 1
    total.flags.writeable = False
    parent = state["tree_parent"]
    if parent is not None:
        side = (state["index"] - 1) % 2
        payload = [state["generation"], state["coll_seq"], state["coll_step"], 2 * chunk + side, total]
        reliability.send_logged(state, ctx, parent, UP, payload, total.nbytes)
        return
    _received_down(state, ctx, chunk, total)


def _received_down(state: dict[str, Any], ctx: Context, chunk: int, total: np.ndarray) -> None:
    if state["tree_down_got"][chunk]:
        return
    state["tree_down_got"][chunk] = True
    bounds = _bounds(state, ctx)
    state["result"][bounds[chunk] : bounds[chunk + 1]] = total
    payload = reliability.stamp(
        [state["generation"], state["coll_seq"], state["coll_step"], chunk, total], ctx
    )
    for child in state["tree_children"]:
        reliability.send_logged(state, ctx, child, DOWN, list(payload), total.nbytes)
    state["tree_down_done"] += 1
    if state["tree_down_done"] == len(bounds) - 1:
        collective.complete(state, ctx, state["result"])


def waits_on(state: dict[str, Any]) -> list[str]:
    """Children whose sums are missing for some chunk, else the parent (broadcast pending)."""
    if not state["coll_active"]:
        return []
    missing = []
    for side, name in enumerate(state["tree_children"]):
        slots = state["tree_left"] if side == LEFT else state["tree_right"]
        if any(slot is None for slot in slots):
            missing.append(name)
    if missing:
        return missing
    return [state["tree_parent"]] if state["tree_parent"] is not None else []


def progress(state: dict[str, Any]) -> int:
    """Chunks this rank has sent up plus chunks it has received coming down."""
    return state["tree_up_done"] + state["tree_down_done"] if state["coll_active"] else 0


def missing(state: dict[str, Any]) -> list[list[Any]]:
    """``[peer, kind, part]`` this rank waits on: children's sums per chunk, then the parent's total."""
    if not state["coll_active"]:
        return []
    wanted: list[list[Any]] = []
    children = state["tree_children"]
    for chunk, got in enumerate(state["tree_got"]):
        if got < len(children):
            for side, child in enumerate(children):
                slots = state["tree_left"] if side == LEFT else state["tree_right"]
                if slots[chunk] is None:
                    wanted.append([child, UP, 2 * chunk + side])
        elif state["tree_parent"] is not None and not state["tree_down_got"][chunk]:
            wanted.append([state["tree_parent"], DOWN, chunk])
    return wanted


HANDLERS = collective.receivers(UP, DOWN, _process, _sender)
