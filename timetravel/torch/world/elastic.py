"""Restarts as torchelastic does them: on a rank's failure, every rank starts again (``--max-restarts``).

torchrun's agent, on any worker failure, stops all workers and starts them again with
``TORCHELASTIC_RESTART_COUNT`` incremented, up to ``--max-restarts`` times; the script resumes from
its own checkpoint files. Here the ``c10d`` node does the same in the World: it forgets the
collectives of the failed incarnation, orders fresh rank processes (as data: the host carries it out
after the handler), and sends every rank node a ``restart`` event ``restart_delay`` later. Events of an older incarnation still in the queue
carry its number and are ignored, so nothing of the dead ranks reaches the new ones.
"""

from __future__ import annotations

from typing import Any

from timetravel.sim.context import Context
from timetravel.torch.world import resume
from timetravel.torch.world.orders import order

RESTARTABLE_KINDS = ("crash", "exception", "oom")
"""What torchelastic restarts on: a worker that died or exited non-zero (a raised exception, a
MemoryError)."""


def rank_failed(
    state: dict[str, Any], ctx: Context, rank: int, kind: str, message: str, site: str, **extra: Any
) -> None:
    """Restart the job if restarts are left and the failure is one torchelastic restarts on; else fail."""
    if kind in RESTARTABLE_KINDS and state["restarts"] < ctx.world.config["max_restarts"]:
        restart(state, ctx, f"r{rank} {kind}: {message}")
        return
    ctx.fail(kind, message, site, node=f"r{rank}")
    if extra:
        ctx.world.failures[-1].update(extra)


def restart(state: dict[str, Any], ctx: Context, reason: str) -> None:
    """Forget the failed incarnation's collectives, order fresh rank processes (carried out after the
    handler: every surviving rank settles at its next wait, then all are forked anew; host.py) and
    send every rank node a ``restart`` event ``restart_delay`` later."""
    state["restarts"] += 1
    state["incarnation"] += 1
    for key in ("ops", "results", "waiting", "exited", "steps", "delivering"):
        state[key] = {}
    state["flight"] = {str(rank): [] for rank in range(state["ranks"])}
    resume.forget(state)
    ctx.log(f"restart {state['restarts']} of {ctx.world.config['max_restarts']}: {reason}")
    order(state, "restart")
    t_ns = ctx.now + ctx.world.config["restart_delay"]
    for rank in range(state["ranks"]):
        ctx.deliver(t_ns, f"r{rank}", "restart", state["incarnation"])


def current(state: dict[str, Any], message: dict[str, Any]) -> bool:
    """Whether a message comes from the live incarnation (older ones are dead ranks' leftovers)."""
    return bool(message.get("incarnation", 0) == state["incarnation"])
