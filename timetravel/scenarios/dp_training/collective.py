"""What every all-reduce algorithm shares: entering and completing a collective, and sorting messages.

A collective is identified by ``(generation, seq)``: ``generation`` counts elastic restarts of the
job (a restart builds a new communicator, so messages of an older generation are stale), ``seq``
counts the collectives a rank has issued in this generation (NCCL's sequence number). Every message
is ``[generation, seq, step, part, data, checksum]`` where ``step`` is the training step the sender
issued the collective for, ``part`` is the algorithm's own index (ring step, tree chunk, sender
rank) and ``checksum`` (with ``checksums=on``) guards ``data`` (:mod:`reliability`).

Receiving a message sorts it into one of four cases:

* stale: an older generation, or a collective this rank has already completed (a duplicate);
* current: the collective this rank is in;
* future: a collective this rank has not entered yet, or a newer generation than the rank has
  joined (a peer resumed first): it is buffered in the bounded inbox;
* mismatch: same sequence number, different collective (the sender issued it for another step):
  a ``collective_mismatch`` failure, one of the leading causes of real NCCL hangs, which PyTorch's
  ``TORCH_DISTRIBUTED_DEBUG=DETAIL`` catches the same way, by comparing collective fingerprints.

Rank state keys owned here: ``coll_seq``, ``coll_step``, ``coll_active``, ``coll_entered_ns``,
``coll_done_seq``, ``coll_done_step``, ``coll_done_ns``, ``inbox``, ``contribution``, ``result``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timetravel.scenarios.dp_training import device, reliability
from timetravel.sim import Context, Event

STALE = 0
CURRENT = 1
FUTURE = 2
MISMATCH = 3

GENERATION = 0
SEQ = 1
STEP = 2
PART = 3
DATA = 4

INBOX_SLACK = 64
MISMATCH_SITE = "dp_training.collective_mismatch"
INBOX_SITE = "dp_training.inbox_limit"


def inbox_limit(ranks: int) -> int:
    """Messages a rank may buffer: two collectives' worth from every peer, plus slack."""
    return 4 * ranks + INBOX_SLACK


def initial_state() -> dict[str, Any]:
    return {
        "coll_seq": -1,
        "coll_step": 0,
        "coll_active": False,
        "coll_entered_ns": -1,
        "coll_done_seq": -1,
        "coll_done_step": 0,
        "coll_done_ns": -1,
        "inbox": [],
        "contribution": None,
        "result": None,
        "coll_heard_ns": -1,
        "hang_reported": None,
        **reliability.initial_state(),
    }


def classify(state: dict[str, Any], message: list[Any]) -> int:
    """Stale, current, future or mismatch (see the module docstring)."""
    generation = message[GENERATION]
    if generation != state["generation"]:
        return FUTURE if generation > state["generation"] else STALE
    seq = message[SEQ]
    current = state["coll_seq"]
    if seq < current or (seq == current and not state["coll_active"]):
        return STALE
    if seq > current:
        return FUTURE
    return CURRENT if message[STEP] == state["coll_step"] else MISMATCH


def report_mismatch(state: dict[str, Any], ctx: Context, message: list[Any], sender: str) -> None:
    ctx.fail(
        "collective_mismatch",
        f"{ctx.node} is in collective #{state['coll_seq']} as the all-reduce of step {state['coll_step']}, "
        f"but {sender} sent collective #{message[SEQ]} as the all-reduce of step {message[STEP]}",
        site=MISMATCH_SITE,
    )


Process = Callable[[dict[str, Any], Context, str, list[Any]], None]
"""``process(state, ctx, kind, message)``: a collective's handling of a current message."""
SenderOf = Callable[[str, list[Any]], str]
"""``sender_of(kind, message)``: who sent it, as a mismatch report names them."""


def receivers(up: str, down: str, process: Process, sender_of: SenderOf) -> dict[str, Any]:
    """The handlers of a parameter-server or tree collective's two message kinds: each routes its
    message through :func:`dispatch`."""

    def on_up(state: dict[str, Any], event: Event, ctx: Context) -> None:
        dispatch(state, ctx, up, event[4], process, sender_of(up, event[4]))

    def on_down(state: dict[str, Any], event: Event, ctx: Context) -> None:
        dispatch(state, ctx, down, event[4], process, sender_of(down, event[4]))

    return {up: on_up, down: on_down}


def drain(
    state: dict[str, Any], ctx: Context, kinds: tuple[str, str], process: Process, sender_of: SenderOf
) -> None:
    """Handle the kept messages of ``kinds`` that are for the collective now current; stop at a
    mismatch (a kept message was checked intact when it was kept)."""
    for kind in kinds:
        for message in take_current(state, kind):
            verdict = classify(state, message)
            if verdict == MISMATCH:
                report_mismatch(state, ctx, message, sender_of(kind, message))
                return
            if verdict == CURRENT:
                process(state, ctx, kind, message)


def dispatch(
    state: dict[str, Any],
    ctx: Context,
    kind: str,
    message: list[Any],
    process: Process,
    sender: str,
) -> None:
    """Route one checked message of a parameter-server or tree collective: process it when it is
    for the current collective, keep it when it is for a later one, report a mismatch otherwise."""
    if not reliability.intact(state, message):
        return
    verdict = classify(state, message)
    if verdict == CURRENT:
        process(state, ctx, kind, message)
    elif verdict == FUTURE:
        buffer(state, ctx, kind, message)
    elif verdict == MISMATCH:
        report_mismatch(state, ctx, message, sender)


def buffer(state: dict[str, Any], ctx: Context, kind: str, message: list[Any]) -> None:
    """Keep a message for later; a full inbox is a failure, never a silent drop."""
    inbox = state["inbox"]
    if len(inbox) >= inbox_limit(state["ranks"]):
        ctx.fail("assertion", f"{ctx.node}: inbox holds {len(inbox)} messages, its limit", site=INBOX_SITE)
        return
    inbox.append([kind, message])


def enter(state: dict[str, Any], ctx: Context, step: int, contribution: Any) -> None:
    """Begin this rank's next collective: the all-reduce of ``step`` over ``contribution``."""
    if state["coll_active"]:
        raise AssertionError(f"{ctx.node} entered a collective while #{state['coll_seq']} is active")
    state["coll_seq"] += 1
    state["coll_step"] = step
    state["coll_active"] = True
    state["coll_entered_ns"] = ctx.now
    state["contribution"] = contribution
    state["coll_heard_ns"] = ctx.now
    reliability.prune(state, state["coll_seq"])


def complete(state: dict[str, Any], ctx: Context, result: Any, finish_kernel: bool = True) -> None:
    """The collective is done on this rank: its result is ready, so the open comm kernel ends
    (``finish_kernel=False``: it has ended already, the collective level scheduled its end)."""
    state["coll_active"] = False
    state["coll_done_seq"] = state["coll_seq"]
    state["coll_done_step"] = state["coll_step"]
    state["coll_done_ns"] = ctx.now
    state["result"] = result
    state["contribution"] = None
    if finish_kernel:
        device.finish_allreduce(ctx)


def take_current(state: dict[str, Any], kind: str) -> list[list[Any]]:
    """Remove and return the buffered messages of ``kind`` that belong to the current collective."""
    inbox = state["inbox"]
    if not inbox:
        return []
    taken = []
    kept = []
    for entry in inbox:
        message = entry[1]
        if entry[0] == kind and classify(state, message) != FUTURE:
            taken.append(message)
        else:
            kept.append(entry)
    state["inbox"] = kept
    return taken
