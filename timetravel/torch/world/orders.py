"""What the plain-data backend decides for the live rank processes, kept as data until it is done.

c10d never touches a process. When it decides that rank r must be handed result N, that rank r is
killed (a crash fault) or that every rank restarts (torchelastic), it appends an order to its own
state (:func:`order`). After c10d's handler returns, the rank nodes' side (ranks.py ``obeying``)
takes the orders out (:func:`take`) and the run's host carries them out (host.py ``carry_out``). The
orders exist only while a handler runs: no snapshot, hash, diff or recording ever sees them.
"""

from __future__ import annotations

from typing import Any

ORDERS_KEY = "orders"
ORDERS_PER_EVENT_MAX = 65_536
"""A handler orders at most a release per rank and a kill, or one restart: far fewer than this."""
KINDS = ("release", "kill", "restart")


def order(state: dict[str, Any], kind: str, *arguments: Any) -> None:
    """Decide ``kind`` (``release`` rank, number, message; ``kill`` rank; ``restart``)."""
    assert kind in KINDS, f"unknown order {kind!r}"
    orders = state.setdefault(ORDERS_KEY, [])
    assert len(orders) < ORDERS_PER_EVENT_MAX, "a handler ordered more than a run has ranks"
    orders.append([kind, *arguments])


def take(state: dict[str, Any]) -> list[list[Any]]:
    """The orders of the handler that just ran, removed from its state (none: an empty list)."""
    return state.pop(ORDERS_KEY, None) or []
