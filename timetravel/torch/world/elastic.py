"""Restarts as torchelastic does them: on a rank's failure, every rank starts again (``--max-restarts``).

torchrun's agent, on any worker failure, stops all workers and starts them again with
``TORCHELASTIC_RESTART_COUNT`` incremented, up to ``--max-restarts`` times; the script resumes from
its own checkpoint files. Here the ``c10d`` node does the same in the World: it forgets the
collectives of the failed incarnation, asks the driver for fresh rank processes, and sends every rank
node a ``restart`` event ``restart_delay`` later. Events of an older incarnation still in the queue
carry its number and are ignored, so nothing of the dead ranks reaches the new ones.
"""

from __future__ import annotations

from typing import Any

from timetravel.sim.context import Context
from timetravel.torch.world import resume

RESTARTABLE_KINDS = ("crash", "exception")
"""What torchelastic restarts on: a worker that died or exited non-zero (a raised exception)."""


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
    from timetravel.torch.world.scenario import _driver, rank_specs

    live = _driver(ctx)
    _settle(state, ctx, live)
    state["restarts"] += 1
    state["incarnation"] += 1
    for key in ("ops", "results", "waiting", "exited", "steps", "delivering"):
        state[key] = {}
    state["flight"] = {str(rank): [] for rank in range(state["ranks"])}
    resume.forget(state)
    ctx.log(f"restart {state['restarts']} of {ctx.world.config['max_restarts']}: {reason}")
    live.restart(rank_specs(ctx.world.config, ctx.world.seed, state["restarts"], cwd=live.workdir.path))
    t_ns = ctx.now + ctx.world.config["restart_delay"]
    for rank in range(state["ranks"]):
        ctx.deliver(t_ns, f"r{rank}", "restart", state["incarnation"])


def _settle(state: dict[str, Any], ctx: Context, live: Any) -> None:
    """Before the restart kills them: every surviving rank runs to its next wait on the World.

    A rank whose collective completed has its result (as soon as the World released it) and runs
    on in wall time — it may be halfway through ``torch.save`` when the restart kills it, and what
    the restarted ranks then read would depend on the machine's timing. Here each rank is handed every
    result the World released to it and runs until it blocks again (a wait, its exit or its death),
    so the files a restart finds are the same on every run, under a Session or not.
    What such a rank sends after its result is dropped with its incarnation; its output is shown."""
    for rank in range(state["ranks"]):
        offered = int(state["deliveries"].get(str(rank), 0))
        if rank not in live.sockets or offered <= int(ctx.world.nodes[f"r{rank}"]["delivered"]):
            continue  # gone, or its poll took its last result and it ran to its wait then: blocked
        live.deliver(rank, offered)
        live.run_to_next_wait(rank)


def current(state: dict[str, Any], message: dict[str, Any]) -> bool:
    """Whether a message comes from the live incarnation (older ones are dead ranks' leftovers)."""
    return bool(message.get("incarnation", 0) == state["incarnation"])
