"""The rank nodes ``r0`` … ``rN-1``: where the World meets the user's processes (coordinator side).

A rank node stands for one rank process (its state says where the process is and digests what it
was handed). Its handlers are the only code that talks to the processes, through the run's
:class:`~timetravel.torch.world.host.RankHost` (``ctx.processes``):

* ``poll`` — the rank is running: read its calls to the World in order until it blocks (a ``wait``)
  or ends (``exit``), and schedule each as an event on ``c10d`` at the rank's logical time: what it
  reported plus the compute model (``compute_interval`` + a ``torch.compute`` jitter choice in
  ``[0, compute_jitter]``), so ranks doing identical work arrive in a seeded order;
* ``restart`` — a torchelastic restart reached the rank: a fresh state, then poll;
* :func:`obeying` — wraps each of c10d's handlers: c10d is plain data and decides as data
  (``release`` a result, ``kill`` a rank, ``restart`` every rank: orders.py); the order is
  carried out here, after c10d's handler, by the host.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timetravel.sim.context import Context
from timetravel.sim.event import Event
from timetravel.torch.protocol import arrays
from timetravel.torch.protocol.limits import WORK_NS_MAX
from timetravel.torch.protocol.wire import ChannelClosed, ProtocolError
from timetravel.torch.world import hangs
from timetravel.torch.world import state as training_state
from timetravel.torch.world.faults import active, hit
from timetravel.torch.world.orders import take
from timetravel.torch.world.specs import C10D_NODE


def rank_state(t_ns: int, incarnation: int) -> dict[str, Any]:
    """A rank node: where its process is, and a digest of everything the World ever handed it.

    ``delivered`` counts the results its polls handed over (the process may hold one more, on its way:
    :func:`specs.released`); c10d chains their digests (``received``), so two worlds that agree on both gave
    their rank processes the same inputs."""
    return {
        "status": "new",
        "t_ns": t_ns,
        "calls": 0,
        "incarnation": incarnation,
        "delivered": 0,
        "outbox": {},
    }


def on_poll(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """Read the rank's calls until it blocks; each becomes an event at its logical time."""
    rank = int(ctx.node[1:])
    poll = event.payload if isinstance(event.payload, dict) else {"incarnation": event.payload}
    if (
        poll["incarnation"] != state["incarnation"]
        or poll["incarnation"] != ctx.world.nodes[C10D_NODE]["incarnation"]
    ):
        # a poll of a rank process a restart has replaced: the rank's node learns of the restart only
        # at its ``restart`` event, later, so the poll of a result released before it is told by c10d
        return
    delivery = poll.get("delivery")
    messages, ended = ctx.processes.take_messages(ctx.world, ctx.event, rank, delivery)
    if delivery is not None:
        state["delivered"] = delivery
        state["outbox"] = {}  # every call sent before the wait was taken by c10d (earlier events)
    state["status"] = "running"
    state["t_ns"] = max(state["t_ns"], ctx.now)
    stepped = None
    try:
        for message in messages:
            if message.get("kind") == "step" and message.get("state") is not None:
                stepped = message.get("step")
            if not _take(state, message, rank, ctx):
                if stepped is not None and state["status"] in ("waiting", "exited"):
                    # the rank waits (or lingers): the tensors of its latest state step are that step's
                    ctx.processes.state_step_polled(ctx.world, rank, int(stepped))
                return
    finally:
        _deadline_first(state, ctx)
    if isinstance(ended, ChannelClosed):
        state["status"] = "crashed"
        died = {"kind": "died", "rank": rank, "incarnation": state["incarnation"]}
        ctx.deliver(ctx.now, C10D_NODE, "died", died)
    elif isinstance(ended, ProtocolError):
        ctx.fail("exception", f"{ctx.node} sent a malformed message: {ended}", "torch.rank.protocol")
    elif isinstance(ended, TimeoutError):
        state["status"] = "stuck"
        ctx.fail("stuck", str(ended), "torch.rank.stuck")


def _deadline_first(state: dict[str, Any], ctx: Context) -> None:
    """This poll scheduled the rank's calls up to ``state["t_ns"]``: a waiting rank whose timeout runs
    out before then gets its ``deadline`` event first (world/hangs.py)."""
    deadline = hangs.deadline_before(ctx.world.nodes[C10D_NODE], ctx.world.config, state["t_ns"])
    if deadline is not None and deadline >= ctx.now:
        ctx.deliver(deadline, C10D_NODE, "deadline", deadline)


def _take(state: dict[str, Any], message: dict[str, Any], rank: int, ctx: Context) -> bool:
    """One message of the rank, at its logical time; False when the poll ends with it (the rank
    blocks, exits, or sent something malformed)."""
    kind = message.get("kind")
    work_ns = message.get("work_ns", 0)
    if type(work_ns) is not int or not 0 <= work_ns <= WORK_NS_MAX:
        ctx.fail("exception", f"{ctx.node} sent a malformed work_ns: {work_ns!r}", "torch.rank.protocol")
        return False
    if kind == "probe":  # explain's module probe: a side channel, never part of the World
        if ctx.processes.probe is not None:
            ctx.processes.probe.note(rank, message)
        return True
    t_ns = max(state["t_ns"], int(message["t_ns"]))
    if kind in ("call", "exit"):
        t_ns += _compute_ns(rank, work_ns, ctx)
    state["t_ns"] = t_ns
    state["calls"] += 1
    message["rank"] = rank
    message["incarnation"] = state["incarnation"]
    if kind in SELF_KINDS:
        _to_self(kind, message, t_ns, ctx)
        return True
    if kind == "step":
        training_state.on_step_message(state, message, t_ns, ctx)
    if kind not in ("call", "wait", "step", "exit"):
        ctx.fail("exception", f"{ctx.node} sent an unknown message kind {kind!r}", "torch.rank.protocol")
        return False
    if kind == "call" and not _post_inputs(state, message, ctx):
        return False
    ctx.deliver(t_ns, C10D_NODE, kind, message)
    if kind in ("wait", "exit"):
        state["status"] = "waiting" if kind == "wait" else "exited"
        return False
    return True


SELF_KINDS = ("warning", "metric", "batch")
"""Messages that become an event of their own (a warning for c10d, a metric or a batch for the rank)."""


def _to_self(kind: str, message: dict[str, Any], t_ns: int, ctx: Context) -> None:
    if kind == "warning":
        ctx.deliver(t_ns, C10D_NODE, "warning", message)
    elif kind == "metric":
        ctx.deliver(t_ns, ctx.node, "metric", [message["name"], message["value"], message.get("step")])
    else:
        batch = {key: message[key] for key in ("step", "indices", "dropped", "incarnation")}
        ctx.deliver(t_ns, ctx.node, "batch", batch)


def _compute_ns(rank: int, work_ns: int, ctx: Context) -> int:
    """Compute charged before a call or the exit: the interval, the metered work, any ``slow`` fault,
    then the seeded jitter (choice ``torch.compute``)."""
    interval = ctx.world.config["compute_interval"] + work_ns
    for record in active(ctx, "slow", rank):
        hit(ctx, record, f"compute x{record['params']['compute_factor']:g}")
        interval = int(interval * record["params"]["compute_factor"])
    jitter = ctx.world.config["compute_jitter"]
    return interval + (ctx.choose("torch.compute", jitter + 1) if jitter else 0)


def _post_inputs(state: dict[str, Any], message: dict[str, Any], ctx: Context) -> bool:
    """Keep a call's tensors in this rank's own ``outbox`` until c10d takes them, not in the event.

    Events are hashed into the chain and stored in batches of thousands; a bucket of gradients in
    every call event would make a batch of a 1M-parameter model's run hundreds of megabytes. The
    event carries their digests; in the node state they are arrays (a recording's snapshots keep
    the large ones as digests: sim/elided.py)."""
    try:
        decoded = [arrays.decode_summarized(wire) for wire in message.pop("inputs", [])]
        inputs = [array for array, _summary in decoded]
        described = [[arrays.dtype_name(array), list(array.shape), *summary] for array, summary in decoded]
    except arrays.TensorFormatError as error:
        ctx.fail("exception", f"{ctx.node}: {error}", "torch.collective.tensor")
        return False
    # the call event keeps each tensor's skeleton and digest (dtype, shape, xxh3-64, non-finite
    # elements), so the hash chain covers every byte a rank sends; the bytes wait here
    message["inputs"] = described
    state.setdefault("outbox", {})[str(message["id"])] = inputs
    return True


def on_restart(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """A torchelastic restart reached this rank: a fresh process, a fresh state, then run it."""
    state.update(rank_state(ctx.now, event.payload))
    on_poll(state, event, ctx)


def on_metric(state: dict[str, Any], event: Event, ctx: Context) -> None:
    name, value, _step = event.payload  # the logical time orders a metric; the script's step is not kept
    ctx.metric(str(name), value)


def obeying(
    handler: Callable[[dict[str, Any], Event, Context], None],
) -> Callable[[dict[str, Any], Event, Context], None]:
    """c10d's ``handler``, then what it ordered for the live processes, carried out by the host."""

    def handle(state: dict[str, Any], event: Event, ctx: Context) -> None:
        handler(state, event, ctx)
        orders = take(state)
        if orders:
            ctx.processes.carry_out(ctx.world, orders)

    handle.__name__ = handler.__name__
    handle.__doc__ = handler.__doc__
    return handle
