"""The GPU side of a rank: how long its kernels take and when the rank hears they finished.

Until the fabric's GPU stream model is wired in, a kernel is a timer: the compute kernel (forward
and backward) runs for the FLOP model's time plus a jitter choice, the optimizer kernel for
``optimizer_time``, and the rank gets a completion event carrying ``[generation, step]`` so that a
completion from before an elastic restart is recognised as stale. The step pipeline only calls
the functions below, so moving to streams (compute stream -> event -> comm stream -> event ->
optimizer stream) changes this module, not the pipeline.
"""

from __future__ import annotations

from typing import Any

from timetravel.sim import Context

COMPUTE_DONE = "compute_done"
UPDATE_DONE = "update_done"
COMPUTE_JITTER_SITE = "compute.jitter"


def compute_duration_ns(state: dict[str, Any], ctx: Context) -> int:
    """The FLOP model's time for this rank, plus jitter drawn at ``compute.jitter``."""
    jitter_ns = ctx.world.config["compute_jitter"]
    extra_ns = ctx.choose(COMPUTE_JITTER_SITE, jitter_ns + 1) if jitter_ns else 0
    return state["compute_ns"] + extra_ns


def launch_compute(state: dict[str, Any], ctx: Context, step: int) -> None:
    """Forward and backward of ``step``: completes as event ``compute_done``."""
    ctx.timer(compute_duration_ns(state, ctx), COMPUTE_DONE, [state["generation"], step])


def launch_optimizer(state: dict[str, Any], ctx: Context, step: int) -> None:
    """The optimizer kernel of ``step``, after the all-reduce: completes as event ``update_done``."""
    ctx.timer(ctx.world.config["optimizer_time"], UPDATE_DONE, [state["generation"], step])
