"""The per-rank collective watchdog: a timer chain that runs while a rank waits in a collective.

PyTorch's ProcessGroupNCCL runs a watchdog thread that checks every collective a rank has issued
and aborts the job when one outlives its timeout, dumping the flight recorder. Here, entering a
collective arms a check every ``retransmit_timeout``; the chain ends by itself at the first check
after the collective completes, so a finished job leaves no timer behind and the run ends within
one interval of its last step. At each check:

* when the collective has heard nothing for ``retransmit_timeout`` (no message taken, no request
  made), the rank asks its peers to resend what it still waits on (:mod:`reliability`);
* when the collective has waited ``hang_timeout`` the rank reports a suspected hang to the
  monitor, once, which decides from every rank's progress (``monitor.on_suspect``).

Rank state keys owned here: ``coll_heard_ns`` (set on entering and on every message the
collective takes) and ``hang_reported`` (the collective whose hang it reported).
"""

from __future__ import annotations

from typing import Any

from timetravel.scenarios.dp_training import allreduce, reliability
from timetravel.scenarios.dp_training.params import collective_level
from timetravel.sim import Context, Event

CHECK = "coll_check"
SUSPECT = "suspect"
MONITOR = "monitor"


def interval_ns(config: dict[str, Any]) -> int:
    """Every ``retransmit_timeout`` (at the collective level only the first rank in runs the chain,
    and asks nobody to resend: the fabric folds the recovery in)."""
    return max(1, min(config["retransmit_timeout"], config["hang_timeout"]))


def arm(state: dict[str, Any], ctx: Context) -> None:
    """Start the chain for the collective just entered."""
    ctx.timer(interval_ns(ctx.world.config), CHECK, [state["generation"], state["coll_seq"]])


def on_check(state: dict[str, Any], event: Event, ctx: Context) -> None:
    generation, seq = event[4]
    if generation != state["generation"] or seq != state["coll_seq"] or not state["coll_active"]:
        return
    config = ctx.world.config
    now = ctx.now
    quiet_since = max(state["coll_heard_ns"], state["resend_asked_ns"])
    if now - quiet_since >= config["retransmit_timeout"] and not collective_level(config):
        reliability.request_missing(state, ctx, allreduce.missing(config["allreduce"], state))
    waited_ns = now - state["coll_entered_ns"]
    hang_timeout = config["hang_timeout"]
    if waited_ns >= hang_timeout and state["hang_reported"] != [generation, seq]:
        state["hang_reported"] = [generation, seq]
        ctx.deliver(now, MONITOR, SUSPECT, [state["index"], generation, seq])
    delay_ns = interval_ns(config)
    if waited_ns < hang_timeout:
        delay_ns = min(delay_ns, hang_timeout - waited_ns)
    ctx.timer(delay_ns, CHECK, [generation, seq])


HANDLERS = {CHECK: on_check}
