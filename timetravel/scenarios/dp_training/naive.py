"""Naive all-reduce: a parameter server. Every rank sends its whole bucket to rank 0, which sums
and sends the total back to everyone.

It is the baseline the ring and the tree improve on: the server's link carries 2(N-1) buckets per
step, so its time grows linearly with N. Rank 0 is the server (it contributes too).

``reduce_order`` decides the bits: canonical keeps every contribution and sums them in rank order
(0, 1, 2, ...) once all have arrived (:func:`canonical_sum`, shared with the oracle's reference);
arrival adds each bucket into a running sum the moment it arrives.

Rank state keys owned here: ``ps_parts`` (server, canonical: contributions by rank), ``ps_acc``
(server, arrival: the running sum), ``ps_heard`` (server: which ranks it has heard), ``ps_count``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from timetravel.scenarios.dp_training import collective, reliability
from timetravel.scenarios.dp_training.collective import DATA, PART
from timetravel.scenarios.dp_training.numerics import sequential_sum
from timetravel.sim import Context

UP = "ps_up"
DOWN = "ps_down"
SERVER_INDEX = 0
SERVER = "r0"


def canonical_sum(contributions: np.ndarray) -> np.ndarray:
    """Rank 0 + rank 1 + ... left to right: what the server computes in canonical order."""
    return sequential_sum(contributions)


def start(state: dict[str, Any], ctx: Context) -> None:
    contribution = state["contribution"]
    ranks = state["ranks"]
    if state["index"] != SERVER_INDEX:
        payload = [state["generation"], state["coll_seq"], state["coll_step"], state["index"], contribution]
        reliability.send_frozen(state, ctx, SERVER, UP, payload, contribution.nbytes)
    else:
        arrival = ctx.world.config["reduce_order"] == "arrival"
        state["ps_heard"] = [True] + [False] * (ranks - 1)
        state["ps_count"] = 1
        state["ps_acc"] = contribution.copy() if arrival else None
        state["ps_parts"] = None if arrival else [None] * ranks
        if ranks == 1:
            _broadcast(state, ctx)
            return
    if state["inbox"]:
        collective.drain(state, ctx, (UP, DOWN), _process, _sender)


def _sender(kind: str, message: list[Any]) -> str:
    return f"r{message[PART]}" if kind == UP else SERVER


def _process(state: dict[str, Any], ctx: Context, kind: str, message: list[Any]) -> None:
    state["coll_heard_ns"] = ctx.now
    if kind == DOWN:
        collective.complete(state, ctx, message[DATA].copy())
        return
    sender = message[PART]
    if state["ps_heard"][sender]:
        return
    state["ps_heard"][sender] = True
    state["ps_count"] += 1
    if state["ps_acc"] is not None:
        state["ps_acc"] = state["ps_acc"] + message[DATA]
    else:
        state["ps_parts"][sender] = message[DATA]
    if state["ps_count"] == state["ranks"]:
        _broadcast(state, ctx)


def _broadcast(state: dict[str, Any], ctx: Context) -> None:
    arrival_sum = state["ps_acc"]
    if arrival_sum is None:
        state["ps_parts"][SERVER_INDEX] = state["contribution"]
        arrival_sum = canonical_sum(np.stack(state["ps_parts"]))
    total = arrival_sum
    state["ps_parts"] = None
    state["ps_acc"] = None
    total.flags.writeable = False
    payload = reliability.stamp(
        [state["generation"], state["coll_seq"], state["coll_step"], SERVER_INDEX, total], ctx
    )
    for rank in range(1, state["ranks"]):
        reliability.send_logged(state, ctx, f"r{rank}", DOWN, list(payload), total.nbytes)
    collective.complete(state, ctx, total.copy())


def waits_on(state: dict[str, Any]) -> list[str]:
    """The server waits on the ranks it has not heard; every other rank waits on the server."""
    if not state["coll_active"]:
        return []
    if state["index"] != SERVER_INDEX:
        return [SERVER]
    return [f"r{rank}" for rank, heard in enumerate(state["ps_heard"]) if not heard]


def progress(state: dict[str, Any]) -> int:
    """The server: ranks heard; any other rank: nothing to count until the total arrives."""
    if not state["coll_active"] or state["index"] != SERVER_INDEX:
        return 0
    return state["ps_count"]


def missing(state: dict[str, Any]) -> list[list[Any]]:
    """``[peer, kind, part]`` this rank waits on: unheard ranks (server), else the server's total."""
    if not state["coll_active"]:
        return []
    if state["index"] != SERVER_INDEX:
        return [[SERVER, DOWN, SERVER_INDEX]]
    return [[f"r{rank}", UP, rank] for rank, heard in enumerate(state["ps_heard"]) if not heard]


HANDLERS = collective.receivers(UP, DOWN, _process, _sender)
