"""The GPU side of a rank: the kernels of one step on the fabric's streams, and the events between them.

One step queues, as a PyTorch DDP step does (``fabric.launch``/``record``/``wait``)::

    compute: forward_backward (reads weights, writes grad) -> record grad_ready
    comm:    wait grad_ready -> allreduce (open kernel: reads grad, writes staging)
    ... the host hears the all-reduce finish ...
    comm:    unpack (staging -> grad) -> record grad_reduced
    compute: wait grad_reduced -> optimizer (reads grad, writes weights)

The all-reduce is an *open* kernel: it starts when the comm stream reaches it (the host hears
``allreduce_start`` and begins the message exchange; at the collective level the handler of the
event that started it, ``compute_done`` or ``unpack_done``, enters the collective itself, which
saves an event per rank per step) and ends when the exchange completes on this
rank (:func:`finish_allreduce`). Each kernel's maths runs in its completion handler, when its
effects become visible: the gradient at ``compute_done``, the averaged result at
``allreduce_done``, the copy into the gradient buffer at ``unpack_done``, the update at
``update_done``. Every payload is ``[generation, step]``; a restart bumps the generation (and the
fabric the GPU's epoch), so work from before it is recognised and ignored.

The planted bug ``missing_wait`` drops the compute stream's wait for ``grad_reduced``: the
optimizer then runs concurrently with ``unpack``. Nominally unpack (``unpack_time``) finishes first
and nothing goes wrong; when the fabric's completion-order choice (site ``gpu.order``) flips them,
the optimizer reads the gradient buffer before the average lands in it and applies the rank's
local gradient. The race detector sees the missing edge on every seed.
"""

from __future__ import annotations

from typing import Any

from timetravel import fabric
from timetravel.scenarios.dp_training.params import collective_level
from timetravel.sim import Context

COMPUTE = "compute"
COMM = "comm"
GRAD_READY = "grad_ready"
GRAD_REDUCED = "grad_reduced"
COMPUTE_DONE = "compute_done"
ALLREDUCE_START = "allreduce_start"
ALLREDUCE_DONE = "allreduce_done"
UNPACK_DONE = "unpack_done"
UPDATE_DONE = "update_done"
ALLREDUCE_KERNEL = "allreduce"
COMPUTE_JITTER_SITE = "compute.jitter"
BUFFERS = ("grad",)
"""Buffers a corrupt fault may name (the gradient on its way to the all-reduce)."""


def compute_duration_ns(state: dict[str, Any], ctx: Context) -> int:
    """The FLOP model's time for this rank, plus jitter drawn at ``compute.jitter``.

    A straggler (a ``slow`` fault) is the fabric's business: it stretches the kernel by its
    compute factor.
    """
    jitter_ns = ctx.world.config["compute_jitter"]
    extra_ns = ctx.choose(COMPUTE_JITTER_SITE, jitter_ns + 1) if jitter_ns else 0
    return state["compute_ns"] + extra_ns


def launch_step(state: dict[str, Any], ctx: Context, step: int) -> None:
    """Queue forward+backward and the all-reduce of ``step`` (see the module docstring)."""
    payload = [state["generation"], step]
    fabric.launch(
        ctx,
        COMPUTE,
        "forward_backward",
        compute_duration_ns(state, ctx),
        reads=("weights",),
        writes=("grad",),
        done_kind=COMPUTE_DONE,
        payload=payload,
    )
    fabric.record(ctx, COMPUTE, GRAD_READY)
    fabric.wait(ctx, COMM, GRAD_READY)
    fabric.launch(
        ctx,
        COMM,
        ALLREDUCE_KERNEL,
        None,
        reads=("grad",),
        writes=("staging",),
        done_kind=ALLREDUCE_DONE,
        payload=payload,
        started_kind=None if collective_level(ctx.world.config) else ALLREDUCE_START,
    )


def started_allreduce(state: dict[str, Any]) -> list[int] | None:
    """``[generation, step]`` of the all-reduce kernel running on the comm stream, or None."""
    stream = state[fabric.GPU_KEY]["streams"].get(COMM)
    running = stream["running"] if stream is not None else None
    if running is None or running["name"] != ALLREDUCE_KERNEL:
        return None
    payload: list[int] = running["payload"]
    return payload


def finish_allreduce(ctx: Context) -> None:
    """The message exchange is complete on this rank: end the open all-reduce kernel."""
    fabric.finish(ctx, COMM, ALLREDUCE_KERNEL)


def launch_update(state: dict[str, Any], ctx: Context, step: int) -> None:
    """Queue unpack (comm) and the optimizer (compute), ordered by ``grad_reduced`` unless the bug."""
    config = ctx.world.config
    payload = [state["generation"], step]
    fabric.launch(
        ctx,
        COMM,
        "unpack",
        config["unpack_time"],
        reads=("staging",),
        writes=("grad",),
        done_kind=UNPACK_DONE,
        payload=payload,
    )
    fabric.record(ctx, COMM, GRAD_REDUCED)
    if config["bug"] != "missing_wait":
        fabric.wait(ctx, COMPUTE, GRAD_REDUCED)
    fabric.launch(
        ctx,
        COMPUTE,
        "optimizer",
        config["optimizer_time"],
        reads=("grad",),
        writes=("weights",),
        done_kind=UPDATE_DONE,
        payload=payload,
    )
