"""Retransmission: every collective message is logged by its sender and resent when asked.

Faults drop messages (a ``drop`` fault, a partition in drop mode). The protocol survives by
receiver-driven retransmission, as RDMA transports do below NCCL: a rank whose collective has heard
nothing for ``retransmit_timeout`` asks each peer it still waits on (:func:`request_missing`, called
by the watchdog) to send the missing part again, and keeps asking every timeout until it arrives.
A sender keeps what it sent in the last two collectives (the current one, and the previous one for a
peer that is still finishing it) and answers from there (:mod:`resend`): the tree and the parameter
server in ``sent_log`` here, the ring in a compact form of its own (ring.py); a part it has not
sent yet needs no answer, it will come. Receivers already drop duplicates, so an original that was only late
does no harm.

A resent ring message travels as kind ``ring_retx`` so that the planted bug ``stale_chunk`` can
mishandle exactly those (see ring.py); every other kind is resent as itself.

With ``checksums=on`` (the default) every message carries the xxh3-64 of its data as a sixth
field, stamped once when it is first sent. A receiver that finds the data no longer matches (a
bit flipped in flight) drops the message as if it had been lost, and retransmission brings a good
copy: end-to-end integrity turns in-flight corruption from a silent error into a short stall.
Corruption of a buffer *before* it is sent is out of its reach (the checksum is of what was sent).

Rank state keys owned here: ``sent_log`` (``[seq, kind, part, dst, payload, nbytes]`` entries),
``resend_asked_ns``, ``resend_requests``, ``resends`` and ``checksum_drops`` (counts, for reports
and tests).
"""

from __future__ import annotations

from typing import Any

import xxhash

from timetravel.sim import Context, freeze

RESEND = "resend"
RESENT_KIND = {"ring": "ring_retx"}
"""The kind a logged message is resent as, when it differs from the original."""
COLLECTIVES_LOGGED = 2
SENT_LOG_ENTRIES_MAX = 1 << 20
LOG_SITE = "dp_training.sent_log"
_hash64 = xxhash.xxh3_64_intdigest


CHECKSUM = 5
"""Index of the checksum in a message (after generation, seq, step, part, data)."""


def initial_state() -> dict[str, Any]:
    return {"sent_log": [], "resend_asked_ns": -1, "resend_requests": 0, "resends": 0, "checksum_drops": 0}


def stamp(payload: list[Any], ctx: Context) -> list[Any]:
    """Append the checksum of the payload's data (once; only with ``checksums=on``)."""
    if len(payload) == CHECKSUM and ctx.world.config["checksums"]:
        payload.append(_hash64(payload[CHECKSUM - 1]))
    return payload


def intact(state: dict[str, Any], message: list[Any]) -> bool:
    """False (and counted) when a stamped message's data no longer matches its checksum."""
    if len(message) <= CHECKSUM or _hash64(message[CHECKSUM - 1]) == message[CHECKSUM]:
        return True
    state["checksum_drops"] += 1
    return False


def send_logged(
    state: dict[str, Any], ctx: Context, dst: str, kind: str, payload: list[Any], nbytes: int
) -> None:
    """Send a payload that is frozen by construction, and log it for retransmission.

    The caller guarantees what ``freeze`` would: ``payload`` is a new list of ints and one numpy
    array that is read-only and owns its memory (or is only ever read), so no two nodes can reach
    the same mutable data. Skipping the second freeze saves a recursive copy per message on the
    ring's hot path; :func:`send_frozen` is the variant for payloads not frozen yet.
    """
    log = state["sent_log"]
    if len(log) >= SENT_LOG_ENTRIES_MAX:
        ctx.fail("assertion", f"{ctx.node}: sent log holds {len(log)} messages, its limit", site=LOG_SITE)
        return
    stamp(payload, ctx)
    log.append([payload[1], kind, payload[3], dst, payload, nbytes])
    ctx.transport(ctx, dst, kind, payload, nbytes)


def send_frozen(
    state: dict[str, Any], ctx: Context, dst: str, kind: str, payload: list[Any], nbytes: int
) -> None:
    """Freeze ``payload`` (it holds a view of live state), then send and log it."""
    send_logged(state, ctx, dst, kind, freeze(payload), nbytes)


def prune(state: dict[str, Any], seq: int) -> None:
    """Entering collective ``seq``: forget what was sent before the previous collective."""
    oldest = seq - COLLECTIVES_LOGGED + 1
    log = state["sent_log"]
    if log and log[0][0] < oldest:
        state["sent_log"] = [entry for entry in log if entry[0] >= oldest]


def request_missing(state: dict[str, Any], ctx: Context, missing: list[list[Any]]) -> None:
    """Ask each peer for the part this rank waits on: ``missing`` holds ``[peer, kind, part]``."""
    generation = state["generation"]
    seq = state["coll_seq"]
    for peer, kind, part in missing:
        ctx.send(peer, RESEND, [generation, seq, kind, part, ctx.node], 0)
        state["resend_requests"] += 1
    state["resend_asked_ns"] = ctx.now


def resend_logged(
    state: dict[str, Any], ctx: Context, seq: int, kind: str, part: int, requester: str
) -> bool:
    """Send a logged message again to ``requester``; False when it is not in the log (not sent yet)."""
    for logged_seq, logged_kind, logged_part, dst, payload, nbytes in state["sent_log"]:
        if logged_seq == seq and logged_kind == kind and logged_part == part and dst == requester:
            ctx.transport(ctx, dst, RESENT_KIND.get(kind, kind), payload, nbytes)
            return True
    return False
