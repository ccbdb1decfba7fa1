"""Ring all-reduce: reduce-scatter then all-gather, 2(N-1) steps of one chunk each.

The bucket is cut into N chunks (chunk c spans ``bounds[c]:bounds[c + 1]``). At ring step p of the
reduce-scatter (p = 0 .. N-2) rank r sends the partial sum of chunk (r - p) mod N to rank r+1,
which adds its own copy of that chunk and passes it on: after N-1 steps rank r holds the full sum
of chunk (r + 1) mod N. The all-gather (steps N-1 .. 2N-3) then passes the reduced chunks round
once more. Every message is one event; a rank sends one message for each one it receives, so the
ring is a pipeline that needs no per-step bookkeeping beyond ``ring_next``, the step it expects.

Chunk c is summed in the fixed order c, c+1, ..., c-1 whatever the timing: a ring reduces in a
canonical order by construction (``reduce_order`` does not apply). :func:`canonical_sum` computes
that same sum from all contributions at once, for the oracle's fault-free reference.

Messages arrive in step order from one sender unless the fabric reorders them; a message for a later
step, or for the next collective, waits in the inbox and is taken in order.

Rank state keys owned here: ``ring_next``, ``ring_sent`` (what the last two collectives sent,
for retransmission), ``ring_slots`` (only with the planted bug
``stale_chunk``: the last chunk received at each ring step, a reused receive buffer), and
``next``/``prev`` (neighbour names fixed at build).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from timetravel.scenarios.dp_training import collective, reliability
from timetravel.scenarios.dp_training.collective import CURRENT, DATA, FUTURE, MISMATCH, PART, STALE
from timetravel.scenarios.dp_training.numerics import sequential_sum
from timetravel.sim import Context, Event

KIND = "ring"
RETRANSMITTED = "ring_retx"
SENT_PARTIALS = 3
SENT_RESULT = 4


@functools.lru_cache(maxsize=64)
def ring_bounds(elements: int, ranks: int) -> tuple[int, ...]:
    """Chunk boundaries: chunk c is ``[bounds[c], bounds[c + 1])``; sizes differ by at most 1."""
    return tuple(elements * chunk // ranks for chunk in range(ranks + 1))


@functools.lru_cache(maxsize=16)
def _canonical_rows(elements: int, ranks: int) -> np.ndarray:
    """For each element j of chunk c, the ranks in summation order: c, c+1, ... (mod N)."""
    bounds = ring_bounds(elements, ranks)
    chunk_of = np.empty(elements, dtype=np.int64)
    for chunk in range(ranks):
        chunk_of[bounds[chunk] : bounds[chunk + 1]] = chunk
    rows = (np.arange(ranks, dtype=np.int64)[:, None] + chunk_of[None, :]) % ranks
    rows.flags.writeable = False
    return rows


def canonical_sum(contributions: np.ndarray) -> np.ndarray:
    """The ring's sum of a ranks x elements stack, element for element as the messages compute it."""
    ranks, elements = contributions.shape
    rows = _canonical_rows(elements, ranks)
    ordered = contributions[rows, np.arange(elements)[None, :]]
    return sequential_sum(ordered)


def start(state: dict[str, Any], ctx: Context) -> None:
    """Send this rank's own chunk (ring step 0), then take any message that arrived early."""
    contribution = state["contribution"]
    ranks = state["ranks"]
    if ranks == 1:
        collective.complete(state, ctx, contribution.copy())
        return
    state["ring_next"] = 0
    state["result"] = np.zeros_like(contribution)
    partials = np.zeros_like(contribution)
    _remember(state, partials)
    bounds = ring_bounds(contribution.shape[0], ranks)
    index = state["index"]
    partials[bounds[index] : bounds[index + 1]] = contribution[bounds[index] : bounds[index + 1]]
    _send(state, ctx, [state["generation"], state["coll_seq"], state["coll_step"], 0], partials, index, KIND)
    if state["inbox"]:
        _drain(state, ctx)


def on_ring(state: dict[str, Any], event: Event, ctx: Context) -> None:
    message = event[4]
    if reliability.intact(state, message):
        _receive(state, ctx, message)


def on_ring_retransmitted(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """A ring step sent again after a loss. Under the planted bug ``stale_chunk`` the receiver reads
    it from its reused receive buffer for that step, which still holds the previous collective's
    chunk: the retransmitted data is ignored."""
    message = event[4]
    if not reliability.intact(state, message):
        return
    slots = state["ring_slots"]
    if slots is not None and slots[message[PART]] is not None:
        message = [*message[:DATA], slots[message[PART]]]
    _receive(state, ctx, message)


def _receive(state: dict[str, Any], ctx: Context, message: list[Any]) -> None:
    verdict = collective.classify(state, message)
    if verdict == CURRENT:
        part = message[PART]
        expected = state["ring_next"]
        if part == expected:
            _process(state, ctx, message)
            if state["inbox"]:
                _drain(state, ctx)
        elif part > expected:
            collective.buffer(state, ctx, KIND, message)
    elif verdict == FUTURE:
        collective.buffer(state, ctx, KIND, message)
    elif verdict == MISMATCH:
        collective.report_mismatch(state, ctx, message, state["prev"])


def _process(state: dict[str, Any], ctx: Context, message: list[Any]) -> None:
    """Take ring step ``part``: add and pass on (reduce-scatter) or store and pass on (all-gather)."""
    part = message[PART]
    ranks = state["ranks"]
    contribution = state["contribution"]
    elements = len(contribution)
    state["coll_heard_ns"] = ctx.now
    slots = state["ring_slots"]
    if slots is not None:
        slots[part] = message[DATA]
    if part < ranks - 1:
        chunk = (state["index"] - 1 - part) % ranks
        low = elements * chunk // ranks
        high = elements * (chunk + 1) // ranks
        outgoing = np.add(message[DATA], contribution[low:high])
        if part == ranks - 2:
            state["result"][low:high] = outgoing
        else:
            state["ring_sent"][-1][SENT_PARTIALS][low:high] = outgoing
        outgoing.setflags(write=False)
    else:
        chunk = (state["index"] - part - 1) % ranks
        outgoing = message[DATA]
        state["result"][elements * chunk // ranks : elements * (chunk + 1) // ranks] = outgoing
    part += 1
    state["ring_next"] = part
    if part < 2 * ranks - 2:
        payload = reliability.stamp([message[0], message[1], message[2], part, outgoing], ctx)
        ctx.transport(ctx, state["next"], KIND, payload, outgoing.nbytes)
    else:
        state["ring_sent"][-1][SENT_RESULT] = state["result"]
        collective.complete(state, ctx, state["result"])


def _remember(state: dict[str, Any], partials: np.ndarray) -> None:
    """Keep what this collective sends, compactly, for retransmission (this one and the previous).

    A rank's ring sends are one chunk per step, and every chunk index comes up once in each
    phase: the reduce-scatter sends the partial sums of chunks r, r-1, ..., r-N+2 and the
    all-gather sends reduced chunks r+1, r, ..., r-N+3. So two bucket-sized arrays, the partial
    sums and the result, hold everything the rank sent; a resend cuts the chunk out again. (A
    log of the 2N-2 payloads would cost ~300 bytes of Python objects per message: 1.3 GB at
    1024 ranks.) While the collective runs its result is ``state["result"]``; the entry takes it
    over only when the collective completes and nothing writes it any more, because two
    references to an array that is still written would part when a snapshot is restored.
    """
    sent = state["ring_sent"]
    entry = [state["generation"], state["coll_seq"], state["coll_step"], partials, None]
    state["ring_sent"] = [*sent[-(reliability.COLLECTIVES_LOGGED - 1) :], entry]


def _send(
    state: dict[str, Any], ctx: Context, header: list[int], source: np.ndarray, chunk: int, kind: str
) -> None:
    ranks = state["ranks"]
    elements = len(source)
    data = source[elements * chunk // ranks : elements * (chunk + 1) // ranks].copy()
    data.setflags(write=False)
    payload = reliability.stamp([*header, data], ctx)
    ctx.transport(ctx, state["next"], kind, payload, data.nbytes)


def resend(state: dict[str, Any], ctx: Context, seq: int, part: int, requester: str) -> bool:
    """Send ring step ``part`` of collective ``seq`` again, if this rank sent it (True when sent)."""
    if requester != state["next"]:
        return False
    for generation, sent_seq, step, partials, result in state["ring_sent"]:
        if sent_seq != seq or generation != state["generation"]:
            continue
        current = seq == state["coll_seq"]
        if current and part > state["ring_next"]:
            return False  # not sent yet: it will come
        ranks = state["ranks"]
        if part < ranks - 1:
            chunk, source = (state["index"] - part) % ranks, partials
        else:
            chunk = (state["index"] + 1 - (part - ranks + 1)) % ranks
            source = result if result is not None else state["result"]
        _send(state, ctx, [generation, seq, step, part], source, chunk, RETRANSMITTED)
        return True
    return False


def _drain(state: dict[str, Any], ctx: Context) -> None:
    """Take buffered messages of the current collective in ring-step order.

    Each pass looks for the one step the ring can take next, so a burst of b early messages costs
    O(b^2) comparisons and no allocation; bursts are short (a sender drains at most its own inbox).
    """
    inbox = state["inbox"]
    while state["coll_active"] and inbox:
        for position, entry in enumerate(inbox):
            message = entry[1]
            if entry[0] != KIND:
                continue
            verdict = collective.classify(state, message)
            if verdict == FUTURE:
                continue
            if verdict == MISMATCH:
                collective.report_mismatch(state, ctx, message, state["prev"])
                return
            if verdict == STALE or message[PART] < state["ring_next"]:
                del inbox[position]
                break
            if message[PART] == state["ring_next"]:
                del inbox[position]
                _process(state, ctx, message)
                break
        else:
            return


def waits_on(state: dict[str, Any]) -> list[str]:
    """Whom an active rank waits for: its ring predecessor."""
    return [state["prev"]] if state["coll_active"] and state["ranks"] > 1 else []


def progress(state: dict[str, Any]) -> int:
    """Ring steps this rank has taken in its current collective (of 2N-2)."""
    return state["ring_next"] if state["coll_active"] else 0


def missing(state: dict[str, Any]) -> list[list[Any]]:
    """``[peer, kind, part]`` this rank waits on: the next ring step from its predecessor."""
    return [[state["prev"], KIND, state["ring_next"]]] if state["coll_active"] and state["ranks"] > 1 else []


def initial_state(ranks: int, bug: str) -> dict[str, Any]:
    """``ring_sent``: what the last collectives sent (see :func:`_remember`); ``ring_slots``: the
    reused receive buffers that only the ``stale_chunk`` code keeps."""
    return {
        "ring_next": 0,
        "ring_sent": [],
        "ring_slots": [None] * max(0, 2 * ranks - 2) if bug == "stale_chunk" else None,
    }


HANDLERS = {KIND: on_ring, RETRANSMITTED: on_ring_retransmitted}
