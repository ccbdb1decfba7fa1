"""The per-rank collective watchdog: a timer chain that runs while a rank waits in a collective.

PyTorch's ProcessGroupNCCL runs a watchdog thread that checks every collective a rank has issued
and aborts the job when one outlives its timeout, dumping the flight recorder. Here, entering a
collective arms a check every ``watchdog_interval``; the chain ends by itself at the first check
after the collective completes, so a finished job leaves no timer behind and the run ends within
one interval of the last step. When a rank has waited ``hang_timeout`` it reports a suspected hang
to the monitor, which decides from every rank's progress (``monitor.on_suspect``).

(Retransmission after a timeout hooks in here as well: the same check sees a rank that has heard
nothing for a while.)

Rank state keys owned here: ``coll_heard_ns`` (when this rank last took a step of its collective)
and ``hang_reported`` (the collective whose hang it reported, so it reports once).
"""

from __future__ import annotations

from typing import Any

from timetravel.sim import Context, Event

CHECK = "coll_check"
SUSPECT = "suspect"
MONITOR = "monitor"


def interval_ns(config: dict[str, Any]) -> int:
    return max(1, min(config["watchdog_interval"], config["hang_timeout"]))


def arm(state: dict[str, Any], ctx: Context) -> None:
    """Start the chain for the collective just entered."""
    state["coll_heard_ns"] = ctx.now
    ctx.timer(interval_ns(ctx.world.config), CHECK, [state["generation"], state["coll_seq"]])


def on_check(state: dict[str, Any], event: Event, ctx: Context) -> None:
    generation, seq = event[4]
    if generation != state["generation"] or seq != state["coll_seq"] or not state["coll_active"]:
        return
    config = ctx.world.config
    waited_ns = ctx.now - state["coll_entered_ns"]
    hang_timeout = config["hang_timeout"]
    if waited_ns >= hang_timeout and state["hang_reported"] != [generation, seq]:
        state["hang_reported"] = [generation, seq]
        ctx.deliver(ctx.now, MONITOR, SUSPECT, [state["index"], generation, seq])
    delay_ns = interval_ns(config)
    if waited_ns < hang_timeout:
        delay_ns = min(delay_ns, hang_timeout - waited_ns)
    ctx.timer(delay_ns, CHECK, [generation, seq])


HANDLERS = {CHECK: on_check}
