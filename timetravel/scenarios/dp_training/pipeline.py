"""One training step on one rank: compute, all-reduce, unpack, guard, update, repeat.

    step_start -> (device) forward_backward ... compute_done: the local bucket exists
               -> allreduce_start: the comm stream reached the all-reduce; exchange messages
               -> allreduce_done: the exchange finished; the average lands in ``staging``
               -> unpack_done: ``staging`` is copied into the gradient buffer (``bucket``)
               -> update_done: guard, update, detectors, checkpoint, next step

Every payload carries the rank's ``generation`` so that work from before an elastic restart is
ignored. The maths after the all-reduce is :mod:`update`, shared with the oracle.

The planted bug ``local_guard`` lives here: with it, a rank decides to skip from its *own*
gradient norm before the all-reduce (and contributes zeros so as not to poison its peers), instead
of every rank deciding alike from the all-reduced norm. A corruption on one rank then makes that
rank skip alone, and the replicas drift apart silently until the divergence check sees it.

A corrupt fault that names the buffer ``grad`` while the backward kernel runs lands in the
gradient it is writing: the flipped bit is latched in ``grad_pending`` and XORed into the bucket
when the kernel completes (:mod:`elastic` finds the buffer for the fabric).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from timetravel.scenarios.dp_training import allreduce, detectors, device, elastic, replicas, update, watchdog
from timetravel.scenarios.dp_training.collective_level import finish as collective_level_finish
from timetravel.scenarios.dp_training.params import collective_level
from timetravel.sim import Context, Event

STEP_START = "step_start"
PHASE_COMPUTE = "compute"
PHASE_ALLREDUCE = "allreduce"
PHASE_UPDATE = "update"
PHASE_DONE = "done"
METRICS_RANK = 0
"""Rank whose view of the global figures goes into the world's metrics."""


def start_step(state: dict[str, Any], ctx: Context) -> None:
    step = state["step"] + 1
    state["phase"] = PHASE_COMPUTE
    state["step_started_ns"] = ctx.now
    device.launch_step(state, ctx, step)


def on_step_start(state: dict[str, Any], event: Event, ctx: Context) -> None:
    if event[4] == state["generation"]:
        start_step(state, ctx)


def _current(state: dict[str, Any], event: Event) -> int | None:
    """The step an event is about, or None when it comes from an older generation."""
    generation, step = event[4]
    return step if generation == state["generation"] else None


def on_compute_done(state: dict[str, Any], event: Event, ctx: Context) -> None:
    step = _current(state, event)
    if step is None:
        return
    config = ctx.world.config
    bucket = replicas.bucket(state, ctx, step)
    state["loss_local"] = float(bucket[-1])
    pending = state["grad_pending"]
    if pending is not None:
        _latch(bucket, pending)
        state["grad_pending"] = None
    state["bucket"] = bucket
    state["skip_local"] = False
    if config["bug"] == "local_guard":
        _local_guard(state, config, bucket)
    state["phase"] = PHASE_ALLREDUCE
    if collective_level(config):
        _enter_if_started(state, ctx)


def _enter_if_started(state: dict[str, Any], ctx: Context) -> None:
    """Collective level: the comm stream's all-reduce kernel started in this event (no
    ``allreduce_start`` event is sent for it): enter the collective now, as on_allreduce_start does."""
    started = device.started_allreduce(state)
    if started is None or state["coll_active"] or state["phase"] != PHASE_ALLREDUCE:
        return
    generation, step = started
    if generation != state["generation"] or state["coll_done_step"] == step or state["bucket"] is None:
        return
    if allreduce.enter(state, ctx, step, state["bucket"]):
        watchdog.arm(state, ctx)


def _latch(bucket: np.ndarray, pending: np.ndarray) -> None:
    """XOR the bits flipped while the kernel wrote the gradient into the gradient it produced."""
    unsigned = np.dtype(f"uint{8 * bucket.itemsize}")
    bucket.view(unsigned)[...] ^= pending.view(unsigned)


def _local_guard(state: dict[str, Any], config: dict[str, Any], bucket: np.ndarray) -> None:
    """The planted bug: skip from the local norm and contribute zeros instead of the gradient."""
    if update.inspect(bucket, config["grad_skip_norm"], config["loss_scale"]).skipped:
        state["skip_local"] = True
        state["bucket"] = np.zeros_like(bucket)


def on_allreduce_start(state: dict[str, Any], event: Event, ctx: Context) -> None:
    step = _current(state, event)
    if step is None or state["bucket"] is None:
        return
    if allreduce.enter(state, ctx, step, state["bucket"]):
        watchdog.arm(state, ctx)


def on_allreduce_done(state: dict[str, Any], event: Event, ctx: Context) -> None:
    step = _current(state, event)
    if step is None:
        return
    if state["result"] is None and not (
        collective_level(ctx.world.config) and collective_level_finish(state, ctx)
    ):
        return
    config = ctx.world.config
    state["staging"] = replicas.average(
        state["result"], state["ranks"], config["dtype"], config["loss_scale"]
    )
    state["result"] = None
    state["phase"] = PHASE_UPDATE
    device.launch_update(state, ctx, step)


def on_unpack_done(state: dict[str, Any], event: Event, ctx: Context) -> None:
    if _current(state, event) is not None and state["staging"] is not None:
        state["bucket"] = state["staging"]
        state["staging"] = None
    if collective_level(ctx.world.config):
        _enter_if_started(state, ctx)


def on_update_done(state: dict[str, Any], event: Event, ctx: Context) -> None:
    step = _current(state, event)
    if step is None:
        return
    config = ctx.world.config
    bucket = state["bucket"]
    bucket_bytes = bucket.tobytes()  # both memo keys compare it: one copy of the bytes
    verdict = replicas.inspect(bucket, config["grad_skip_norm"], bucket_bytes)
    skip = state["skip_local"] if config["bug"] == "local_guard" else verdict.skipped
    state["weights"], state["slots"] = replicas.apply(
        state["weights"], state["slots"], bucket, config, skip, bucket_bytes
    )
    _record(state, ctx, step, verdict, skip)
    if not detectors.check_step(state, ctx, step):
        return
    elastic.maybe_checkpoint(state, ctx, step)
    if state["step"] < config["steps"]:
        start_step(state, ctx)
    else:
        state["phase"] = PHASE_DONE


def _record(state: dict[str, Any], ctx: Context, step: int, verdict: update.Verdict, skip: bool) -> None:
    state["step"] = step
    state["loss"] = verdict.loss
    state["grad_norm"] = verdict.grad_norm
    state["step_ns"] = ctx.now - state["step_started_ns"]
    state["progress_ns"] = ctx.now
    state["last_applied"] = not skip
    if skip:
        state["skipped_steps"] += 1
    if state["index"] == METRICS_RANK:
        ctx.metric("loss", verdict.loss)
        ctx.metric("grad_norm", verdict.grad_norm)
        ctx.metric("step_time_ns", state["step_ns"])
        if skip:
            ctx.metric("skipped_step", step)


HANDLERS = {
    STEP_START: on_step_start,
    device.COMPUTE_DONE: on_compute_done,
    device.ALLREDUCE_START: on_allreduce_start,
    device.ALLREDUCE_DONE: on_allreduce_done,
    device.UNPACK_DONE: on_unpack_done,
    device.UPDATE_DONE: on_update_done,
}
