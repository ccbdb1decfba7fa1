"""Answering a peer's request to send a message again (the other half of :mod:`reliability`).

The ring remembers what it sent in its own compact form (``ring.resend``); the tree and the
parameter server send few messages per collective and keep them in the generic ``sent_log``.
"""

from __future__ import annotations

from typing import Any

from timetravel.scenarios.dp_training import reliability, ring
from timetravel.sim import Context, Event


def on_resend(state: dict[str, Any], event: Event, ctx: Context) -> None:
    generation, seq, kind, part, requester = event[4]
    if generation != state["generation"]:
        return
    if kind == ring.KIND:
        sent = ring.resend(state, ctx, seq, part, requester)
    else:
        sent = reliability.resend_logged(state, ctx, seq, kind, part, requester)
    if sent:
        state["resends"] += 1


HANDLERS = {reliability.RESEND: on_resend}
