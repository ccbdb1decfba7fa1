"""Crashes and elastic restart: the fabric's hooks, a controller, checkpoints in simulated storage.

What torchelastic does, in miniature. A crash (a fabric ``crash`` fault) takes a rank down; the
host's agent tells the **controller** (``rank_failed``), which opens a new *generation* and tells
every rank to ``stop``: each one drops its GPU work (the fabric's stream state is reset) and its
collective. When the crashed rank comes back (the crash's ``t_end``) it reports ``rank_ready``;
once no rank is missing, the controller sends ``resume``. Every rank then loads the latest
checkpoint from **storage** (weights, optimizer slots and the step number), confirms with
``restored`` and trains on from the step after it. Rank 0 saves a checkpoint every
``checkpoint_every`` steps; storage keeps the last CHECKPOINTS_KEPT.

The data of step k is a function of k alone and every rank restarts from the same checkpoint, so a
crash with restart leaves the weights at every step bit-identical to the fault-free run: the
oracle holds. The planted bug ``restart_without_momentum`` restores the weights but starts the
optimizer from fresh slots: the replicas still agree with each other, and only the oracle sees it.

Control messages can be lost too (a partition cuts a rank off the controller as well), so every
waiting party retries every ``retransmit_timeout``: a restarted rank repeats ``rank_ready``, a
restoring rank repeats ``load``, and the controller repeats ``resume`` to ranks that have not
confirmed. Retrying is bounded: a party that has waited ``hang_timeout`` asks the monitor to judge
the job, which fails it as a hang when no rank has completed a step for that long. A ``rank_ready`` from a new incarnation the controller never heard fail (its
``rank_failed`` was lost) starts a new generation as well.

The fabric's corrupt faults find the gradient buffer through :func:`find_buffer`: the gradient on
its way to the all-reduce (while the backward kernel runs, the bit mask latched into the gradient
being written, ``grad_pending``; during the all-reduce, the contribution being sent).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from timetravel import fabric
from timetravel.fabric import collective as fabric_collective
from timetravel.fabric.gpu import reset_gpu
from timetravel.scenarios.dp_training import collective
from timetravel.scenarios.dp_training.optimizer import initial_slots
from timetravel.sim import Context, Event

CONTROLLER = "controller"
MONITOR = "monitor"
STORAGE = "storage"
CHECKPOINTS_KEPT = 2
RETRY = "elastic_retry"
PHASE_DOWN = "down"
PHASE_JOINING = "joining"
PHASE_STOPPED = "stopped"
PHASE_RESTORING = "restoring"
CONTROL_MESSAGE_BYTES = 64
STEP_START = "step_start"


def rank_name(index: int) -> str:
    return f"r{index}"


# -- rank state that a crash or a stop throws away -------------------------------------------------


def drop_volatile(state: dict[str, Any], generation: int) -> None:
    """Forget the step in progress and the collective (a process restart, or an abort).

    Messages already buffered from the new generation (a peer that resumed first) are kept.
    """
    newer = [entry for entry in state["inbox"] if entry[1][0] >= generation]
    state["generation"] = generation
    state.update(collective.initial_state())
    state["inbox"] = newer
    state["bucket"] = None
    state["staging"] = None
    state["grad_pending"] = None
    state["skip_local"] = False
    state["ring_next"] = 0
    state["ring_sent"] = []
    if state["ring_slots"] is not None:
        state["ring_slots"] = [None] * len(state["ring_slots"])


# -- the fabric's hooks ----------------------------------------------------------------------------


def on_crash(state: dict[str, Any], ctx: Context, record: dict[str, Any]) -> None:
    """The rank went down: its process state is gone; its host agent tells the controller."""
    drop_volatile(state, state["generation"])
    fabric_collective.abandon(ctx.world, ctx.now)
    state["phase"] = PHASE_DOWN
    state["crashes"] += 1
    ctx.send(CONTROLLER, "rank_failed", [state["index"], state["incarnation"]], CONTROL_MESSAGE_BYTES)


def on_restart(state: dict[str, Any], ctx: Context, record: dict[str, Any]) -> None:
    """The rank is back: a fresh process that asks to rejoin (and repeats until it is let in)."""
    state["incarnation"] += 1
    state["phase"] = PHASE_JOINING
    state["elastic_since_ns"] = ctx.now
    _announce(state, ctx)
    _arm_retry(state, ctx)


def find_buffer(state: dict[str, Any], name: str) -> np.ndarray | None:
    """The gradient on its way to the all-reduce, which a corrupt fault on ``grad`` flips a bit of.

    While the backward kernel runs: the mask latched into the gradient it writes. After it, until
    the collective starts: the bucket. During the collective: the contribution it sends from.
    After the all-reduce there is no gradient awaiting it (None: nothing flips), and neither is
    there on a rank that is down, restarting or done.
    """
    phase = state["phase"]
    if name != "grad":
        return None
    if phase == "compute":
        pending = state["grad_pending"]
        if pending is None:
            weights = state["weights"]
            pending = state["grad_pending"] = np.zeros(weights.shape[0] + 1, dtype=weights.dtype)
        return pending
    if phase != "allreduce":
        return None
    key = "contribution" if state["coll_active"] else "bucket"
    buffer = state[key]
    if buffer is not None and not buffer.flags.writeable:
        buffer = state[key] = buffer.copy()
    return buffer


HOOKS = fabric.Hooks(on_crash=on_crash, on_restart=on_restart, find_buffer=find_buffer)


# -- rank handlers ---------------------------------------------------------------------------------


def _announce(state: dict[str, Any], ctx: Context) -> None:
    ctx.send(CONTROLLER, "rank_ready", [state["index"], state["incarnation"]], CONTROL_MESSAGE_BYTES)


def _suspect(ctx: Context, index: int) -> None:
    """Waited ``hang_timeout`` on the restart: let the monitor judge the whole job (bounds the retries)."""
    ctx.deliver(ctx.now, MONITOR, "suspect", [index, -1, -1])


def _arm_retry(state: dict[str, Any], ctx: Context) -> None:
    state["elastic_token"] += 1
    ctx.timer(ctx.world.config["retransmit_timeout"], RETRY, state["elastic_token"])


def _abort(state: dict[str, Any], ctx: Context, generation: int) -> None:
    """Stop all work of the old generation: GPU streams, collective, step in progress."""
    reset_gpu(state)
    drop_volatile(state, generation)
    state["phase"] = PHASE_STOPPED


def on_stop(state: dict[str, Any], event: Event, ctx: Context) -> None:
    generation = event[4]
    if generation > state["generation"] and state["phase"] != PHASE_JOINING:
        _abort(state, ctx, generation)


def on_resume(state: dict[str, Any], event: Event, ctx: Context) -> None:
    generation = event[4]
    if generation < state["generation"]:
        return
    if generation > state["generation"] or state["phase"] == PHASE_JOINING:
        joining = state["phase"] == PHASE_JOINING
        _abort(state, ctx, generation)
        if joining:
            state["phase"] = PHASE_STOPPED
    if state["phase"] == PHASE_STOPPED:
        state["phase"] = PHASE_RESTORING
        state["elastic_since_ns"] = ctx.now
        ctx.send(STORAGE, "load", [state["index"], generation], CONTROL_MESSAGE_BYTES)
        _arm_retry(state, ctx)
    elif state["phase"] != PHASE_RESTORING:
        ctx.send(CONTROLLER, "restored", [state["index"], generation], CONTROL_MESSAGE_BYTES)


def on_restore(state: dict[str, Any], event: Event, ctx: Context) -> None:
    generation, step, weights, slots = event[4]
    if generation != state["generation"] or state["phase"] != PHASE_RESTORING:
        return
    config = ctx.world.config
    state["weights"] = weights.copy()
    if config["bug"] == "restart_without_momentum":
        state["slots"] = initial_slots(config["optimizer"], weights.shape[0])
    else:
        state["slots"] = {
            key: value.copy() if isinstance(value, np.ndarray) else value for key, value in slots.items()
        }
    state["step"] = step
    state["progress_ns"] = ctx.now
    state["restores"] += 1
    state["elastic_token"] += 1
    state["phase"] = "restored"
    ctx.send(CONTROLLER, "restored", [state["index"], generation], CONTROL_MESSAGE_BYTES)
    if step < config["steps"]:
        ctx.timer(0, STEP_START, generation)
    else:
        state["phase"] = "done"


def on_retry(state: dict[str, Any], event: Event, ctx: Context) -> None:
    if event[4] != state["elastic_token"]:
        return
    if ctx.now - state["elastic_since_ns"] >= ctx.world.config["hang_timeout"]:
        _suspect(ctx, state["index"])
    if state["phase"] == PHASE_JOINING:
        _announce(state, ctx)
    elif state["phase"] == PHASE_RESTORING:
        ctx.send(STORAGE, "load", [state["index"], state["generation"]], CONTROL_MESSAGE_BYTES)
    else:
        return
    _arm_retry(state, ctx)


def maybe_checkpoint(state: dict[str, Any], ctx: Context, step: int) -> None:
    """Rank 0 saves weights and optimizer slots every ``checkpoint_every`` steps."""
    every = ctx.world.config["checkpoint_every"]
    if state["index"] != 0 or not every or step % every:
        return
    weights = state["weights"]
    nbytes = weights.nbytes + sum(
        value.nbytes for value in state["slots"].values() if isinstance(value, np.ndarray)
    )
    ctx.send(STORAGE, "save", [step, weights, state["slots"]], nbytes)


RANK_HANDLERS = {"stop": on_stop, "resume": on_resume, "restore": on_restore, RETRY: on_retry}


# -- the controller --------------------------------------------------------------------------------


def controller_state(ranks: int) -> dict[str, Any]:
    return {
        "generation": 0,
        "failed": [],
        "unconfirmed": [],
        "incarnations": [0] * ranks,
        "restarts": 0,
        "resumed_ns": 0,
    }


def _broadcast(state: dict[str, Any], ctx: Context, kind: str, ranks: list[int]) -> None:
    for index in ranks:
        ctx.send(rank_name(index), kind, state["generation"], CONTROL_MESSAGE_BYTES)


def _new_generation(state: dict[str, Any], ctx: Context) -> None:
    state["generation"] += 1
    state["restarts"] += 1
    state["unconfirmed"] = []
    _broadcast(state, ctx, "stop", list(range(ctx.world.config["ranks"])))


def on_rank_failed(state: dict[str, Any], event: Event, ctx: Context) -> None:
    index, incarnation = event[4]
    if incarnation < state["incarnations"][index]:
        return  # that process has come back already (this report was late)
    if index not in state["failed"]:
        state["failed"].append(index)
        _new_generation(state, ctx)


def on_rank_ready(state: dict[str, Any], event: Event, ctx: Context) -> None:
    index, incarnation = event[4]
    if incarnation <= state["incarnations"][index]:
        if index in state["unconfirmed"]:
            _broadcast(state, ctx, "resume", [index])
        return
    state["incarnations"][index] = incarnation
    if index in state["failed"]:
        state["failed"].remove(index)
    else:
        _new_generation(state, ctx)
    if not state["failed"]:
        state["unconfirmed"] = list(range(ctx.world.config["ranks"]))
        state["resumed_ns"] = ctx.now
        _broadcast(state, ctx, "resume", state["unconfirmed"])
        ctx.timer(ctx.world.config["retransmit_timeout"], RETRY, state["generation"])


def on_restored(state: dict[str, Any], event: Event, ctx: Context) -> None:
    index, generation = event[4]
    if generation == state["generation"] and index in state["unconfirmed"]:
        state["unconfirmed"].remove(index)


def on_controller_retry(state: dict[str, Any], event: Event, ctx: Context) -> None:
    if event[4] == state["generation"] and state["unconfirmed"] and not state["failed"]:
        if ctx.now - state["resumed_ns"] >= ctx.world.config["hang_timeout"]:
            _suspect(ctx, -1)
        _broadcast(state, ctx, "resume", state["unconfirmed"])
        ctx.timer(ctx.world.config["retransmit_timeout"], RETRY, state["generation"])


CONTROLLER_HANDLERS = {
    "rank_failed": on_rank_failed,
    "rank_ready": on_rank_ready,
    "restored": on_restored,
    RETRY: on_controller_retry,
}


# -- storage ---------------------------------------------------------------------------------------


def storage_state(weights: np.ndarray, slots: dict[str, Any]) -> dict[str, Any]:
    """Storage holds the step-0 checkpoint from the start (what a job launches from)."""
    return {"checkpoints": [[0, weights.copy(), slots]], "saves": 0, "loads": 0}


def on_save(state: dict[str, Any], event: Event, ctx: Context) -> None:
    step, weights, slots = event[4]
    checkpoints = [entry for entry in state["checkpoints"] if entry[0] != step]
    checkpoints.append([step, weights, slots])
    checkpoints.sort(key=lambda entry: entry[0])
    state["checkpoints"] = checkpoints[-CHECKPOINTS_KEPT:]
    state["saves"] += 1


def on_load(state: dict[str, Any], event: Event, ctx: Context) -> None:
    index, generation = event[4]
    step, weights, slots = state["checkpoints"][-1]
    state["loads"] += 1
    nbytes = weights.nbytes + sum(value.nbytes for value in slots.values() if isinstance(value, np.ndarray))
    ctx.send(rank_name(index), "restore", [generation, step, weights, slots], nbytes)


STORAGE_HANDLERS = {"save": on_save, "load": on_load}
