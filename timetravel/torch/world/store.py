"""The rendezvous store as a node of the World (coordinator side; no torch here).

A script that reaches ``dist.distributed_c10d._get_default_store()`` (or the store torch hands to
``init_process_group``) and calls ``set``/``get``/``add``/``wait`` across ranks must see the other ranks'
keys, as it does through a real ``TCPStore``. Each store call of a rank is a ``call`` to the World like
a collective (charged the compute model at the rank's logical time); ``c10d`` forwards it to the
``store`` node, whose handlers keep the keys and answer after one round trip
(:data:`ROUND_TRIPS` × the fabric's ``network_latency``). A ``get`` or ``wait`` for a key nobody has set
waits, as torch's store does, until a rank sets it or the caller's store timeout passes (then the caller
raises torch's ``DistStoreError: Wait timeout``). Semantics are HashStore's, checked against it:
``add`` keeps decimal text, ``compare_set`` on a missing key sets only when ``expected`` is empty.

State (plain data): ``keys`` (key -> bytes), ``waiting`` (the blocked gets and waits, in arrival order)
and ``calls`` (a count). Keys outlive a torchelastic restart (as the agent's store outlives its
workers); answers to a replaced incarnation's calls are dropped by ``c10d``.
"""

from __future__ import annotations

from typing import Any

from timetravel.sim.context import Context
from timetravel.sim.event import Event

STORE_NODE = "store"
C10D_NODE = "c10d"
ROUND_TRIPS = 1
"""A store call is one request and one answer over the network (TCPStore on rank 0's host)."""

STORE_OPS = ("set", "get", "add", "wait", "check", "compare_set", "delete_key", "num_keys")
KEYS_MAX = 100_000
"""Keys one store may hold: a rendezvous uses a few per rank; more is a script writing data through it."""

VALUE_BYTES_MAX = 64 * 1024 * 1024
"""One value: torch's stores carry small control messages; a tensor belongs in a collective."""


def initial_state() -> dict[str, Any]:
    return {"keys": {}, "waiting": [], "calls": 0}


def _latency(ctx: Context) -> int:
    return 2 * ROUND_TRIPS * int(ctx.world.config.get("network_latency", 0))


def _answer(message: dict[str, Any], outputs: dict[str, Any], ctx: Context, t_ns: int | None = None) -> None:
    reply = {
        "rank": message["rank"],
        "id": message["id"],
        "incarnation": message.get("incarnation", 0),
        "outputs": outputs,
    }
    ctx.deliver((ctx.now if t_ns is None else t_ns) + _latency(ctx), C10D_NODE, "store_result", reply)


def _value(raw: Any) -> bytes:
    value = raw.encode() if isinstance(raw, str) else bytes(raw)
    if len(value) > VALUE_BYTES_MAX:
        raise ValueError(f"a store value of {len(value)} bytes is over VALUE_BYTES_MAX={VALUE_BYTES_MAX}")
    return value


def on_request(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """One store call of a rank: answer it now, or park it until its keys exist (get, wait)."""
    message = event.payload
    op = str(message["op"]).removeprefix("store.")
    arguments = message.get("args", {})
    keys: dict[str, bytes] = state["keys"]
    state["calls"] += 1
    if op not in STORE_OPS:
        _answer(message, {"error": f"unsupported store operation {op!r}"}, ctx)
        return
    try:
        if op in ("get", "wait"):
            wanted = [str(key) for key in (arguments["keys"] if op == "wait" else [arguments["key"]])]
            if all(key in keys for key in wanted):
                _answer(message, _ready(op, wanted, keys), ctx)
                return
            deadline_ns = ctx.now + int(message["timeout_ns"])
            state["waiting"].append(
                {"message": message, "op": op, "keys": wanted, "deadline_ns": deadline_ns}
            )
            ctx.timer(int(message["timeout_ns"]), "timeout", [message["rank"], message["id"]])
            return
        if op == "check":
            _answer(message, {"value": all(str(key) in keys for key in arguments["keys"])}, ctx)
            return
        if op == "num_keys":
            _answer(message, {"value": len(keys)}, ctx)
            return
        if op == "delete_key":
            _answer(message, {"value": keys.pop(str(arguments["key"]), None) is not None}, ctx)
            return
        key = str(arguments["key"])
        if key not in keys and len(keys) >= KEYS_MAX:
            raise ValueError(f"the store holds KEYS_MAX={KEYS_MAX} keys")
        if op == "set":
            keys[key] = _value(arguments["value"])
            outputs: dict[str, Any] = {"value": None}
        elif op == "add":
            total = int(keys.get(key, b"0")) + int(arguments["amount"])
            keys[key] = str(total).encode()
            outputs = {"value": total}
        else:  # compare_set, as HashStore does it
            expected, desired = _value(arguments["expected"]), _value(arguments["desired"])
            current = keys.get(key)
            if (current is None and not expected) or current == expected:
                keys[key] = desired
                outputs = {"value": desired}
            else:
                outputs = {"value": expected if current is None else current}
    except (KeyError, TypeError, ValueError) as error:
        _answer(message, {"error": f"bad store call {op}: {error}"}, ctx)
        return
    _answer(message, outputs, ctx)
    _release_ready(state, ctx)


def _ready(op: str, wanted: list[str], keys: dict[str, bytes]) -> dict[str, Any]:
    return {"value": keys[wanted[0]] if op == "get" else None}


def _release_ready(state: dict[str, Any], ctx: Context) -> None:
    keys = state["keys"]
    still = []
    for parked in state["waiting"]:
        if all(key in keys for key in parked["keys"]):
            _answer(parked["message"], _ready(parked["op"], parked["keys"], keys), ctx)
        else:
            still.append(parked)
    state["waiting"] = still


def on_timeout(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """A parked get or wait reached its caller's store timeout: it raises, as torch's store does."""
    rank, call_id = event.payload
    for position, parked in enumerate(state["waiting"]):
        message = parked["message"]
        if message["rank"] == rank and message["id"] == call_id and parked["deadline_ns"] <= ctx.now:
            del state["waiting"][position]
            _answer(message, {"error": f"Wait timeout for keys {parked['keys']}", "timeout": True}, ctx)
            return


HANDLERS = {"request": on_request, "timeout": on_timeout}
