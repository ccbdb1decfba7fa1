"""fabric_example: the smallest scenario that uses the whole fabric integration API.

Every rank trains a toy model in lockstep: a ``backward`` kernel on the compute stream makes a
gradient; the comm stream waits for it and runs an open ``allreduce`` kernel, during which the rank
sends its gradient to every peer and sums what it gets in rank order; the compute stream waits for
the reduced gradient and runs ``update``. The exchange survives drops, partitions and crashes by
pulling missing gradients after ``retry`` (peers keep recent ones), so the survivable faults leave
the final weights bit-identical, and ``on_end`` fails with ``divergence`` when replicas differ.

It uses: ``fabric_params``, ``install`` (ranks, hooks, buffers), ``with_handlers``, ``transport``,
``launch``/``record``/``wait``/``finish``/``running_kernel``, the hooks ``on_crash``, ``on_restart``,
``find_buffer`` and ``on_fault``, and ``summary``. ``bug=missing_wait`` drops the compute stream's
wait for the reduced gradient: the race detector names it; with ``race_detector=off`` the update
uses the local gradient and the replicas diverge.

Run it: ``PYTHONPATH=. timetravel run fabric_example --scenario tests.fabric_example:SCENARIO``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xxhash

from timetravel import fabric
from timetravel.sim import Context, Event, Param, Scenario, ScenarioView, World

BACKWARD_NS = 40_000
UPDATE_NS = 5_000
LEARNING_RATE = np.float32(0.25)
HISTORY_STEPS = 4
"""Steps of its own gradients a rank keeps to answer peers that missed them."""
RETRIES_MAX = 200
"""Pull attempts per step before the rank gives up and reports a hang."""


def rank_name(index: int) -> str:
    return f"r{index}"


def build(config: dict[str, Any], seed: int) -> World:
    world = World("fabric_example", config, seed)
    size = config["params"]
    ranks = [rank_name(index) for index in range(config["ranks"])]
    for index, name in enumerate(ranks):
        state = {
            "rank": index,
            "step": 0,
            "incarnation": 0,
            "crashes": 0,
            "faults_seen": 0,
            "buffers": {"grad": np.zeros(size, np.float32), "weights": np.ones(size, np.float32)},
            "inbox": {},
            "history": {},
            "retries": 0,
            "done": False,
        }
        world.add_node(name, "rank", state)
    fabric.install(world, ranks, hooks=HOOKS, buffers=("grad", "weights"))
    for name in ranks:
        world.schedule(0, name, "start")
    return world


# -- one training step ----------------------------------------------------------------------------


def start_step(state: dict[str, Any], ctx: Context) -> None:
    step = state["step"]
    fabric.launch(ctx, "compute", "backward", BACKWARD_NS, ("weights",), ("grad",), "backward_done", step)
    fabric.record(ctx, "compute", "grad_ready")
    fabric.wait(ctx, "comm", "grad_ready")
    fabric.launch(
        ctx, "comm", "allreduce", None, ("grad",), ("grad",), started_kind="allreduce_started", payload=step
    )
    fabric.record(ctx, "comm", "reduced")
    if ctx.config["bug"] != "missing_wait":
        fabric.wait(ctx, "compute", "reduced")
    fabric.launch(ctx, "compute", "update", UPDATE_NS, ("grad", "weights"), ("weights",), "update_done", step)


def on_start(state: dict[str, Any], event: Event, ctx: Context) -> None:
    start_step(state, ctx)


def on_backward_done(state: dict[str, Any], event: Event, ctx: Context) -> None:
    buffers = state["buffers"]
    data = np.arange(ctx.config["params"], dtype=np.float32) * np.float32(state["rank"] + 1) / np.float32(100)
    buffers["grad"] = (buffers["weights"] - data) * np.float32(0.5)


def on_allreduce_started(state: dict[str, Any], event: Event, ctx: Context) -> None:
    step = event.payload
    if step != state["step"] or fabric.running_kernel(state, "comm") != "allreduce":
        return
    grad = state["buffers"]["grad"].copy()
    history = state["history"]
    history[str(step)] = grad
    for old in [key for key in history if int(key) <= step - HISTORY_STEPS]:
        del history[old]
    for peer in range(ctx.config["ranks"]):
        if peer != state["rank"]:
            ctx.send(rank_name(peer), "grad", [step, state["rank"], grad], grad.nbytes)
    _store(state, step, state["rank"], grad)
    state["retries"] = 0
    ctx.timer(ctx.config["retry"], "retry", [step, state["incarnation"]])
    _maybe_reduce(state, ctx)


def on_grad(state: dict[str, Any], event: Event, ctx: Context) -> None:
    step, sender, grad = event.payload
    if step >= state["step"]:
        _store(state, step, sender, grad)
        _maybe_reduce(state, ctx)


def _store(state: dict[str, Any], step: int, sender: int, grad: np.ndarray) -> None:
    state["inbox"].setdefault(str(step), {})[str(sender)] = grad


def _maybe_reduce(state: dict[str, Any], ctx: Context) -> None:
    """Once every rank's gradient for this step is in, sum them in rank order and end the allreduce."""
    step = state["step"]
    got = state["inbox"].get(str(step), {})
    if len(got) < ctx.config["ranks"] or fabric.running_kernel(state, "comm") != "allreduce":
        return
    total = np.zeros(ctx.config["params"], np.float32)
    for rank in range(ctx.config["ranks"]):
        total = total + got[str(rank)]
    state["buffers"]["grad"] = total / np.float32(ctx.config["ranks"])
    del state["inbox"][str(step)]
    fabric.finish(ctx, "comm", "allreduce")


def on_retry(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """Pull the gradients still missing for this step (drops, partitions and crashes lose some)."""
    step, incarnation = event.payload
    if step != state["step"] or incarnation != state["incarnation"] or str(step) not in state["inbox"]:
        return
    state["retries"] += 1
    if state["retries"] > RETRIES_MAX:
        ctx.fail(
            "hang", f"step {step}: still missing gradients after {RETRIES_MAX} retries", site="example.retry"
        )
        return
    got = state["inbox"][str(step)]
    for peer in range(ctx.config["ranks"]):
        if str(peer) not in got:
            ctx.send(rank_name(peer), "need", [step, state["rank"]], 16)
    ctx.timer(ctx.config["retry"], "retry", [step, incarnation])


def on_need(state: dict[str, Any], event: Event, ctx: Context) -> None:
    step, asker = event.payload
    grad = state["history"].get(str(step))
    if grad is not None:
        ctx.send(rank_name(asker), "grad", [step, state["rank"], grad], grad.nbytes)


def on_update_done(state: dict[str, Any], event: Event, ctx: Context) -> None:
    buffers = state["buffers"]
    buffers["weights"] = buffers["weights"] - LEARNING_RATE * buffers["grad"]
    state["step"] += 1
    if state["step"] < ctx.config["steps"]:
        start_step(state, ctx)
    else:
        state["done"] = True


# -- hooks ----------------------------------------------------------------------------------------


def on_crash(state: dict[str, Any], ctx: Context, record: dict[str, Any]) -> None:
    """Volatile state is lost with the process; weights and history stand for the checkpoint."""
    state["crashes"] += 1
    state["inbox"] = {}


def on_restart(state: dict[str, Any], ctx: Context, record: dict[str, Any]) -> None:
    """Rejoin at the step the checkpoint is at; peers resend what this rank lost through pulls."""
    state["incarnation"] += 1
    if not state["done"]:
        start_step(state, ctx)


def find_buffer(state: dict[str, Any], name: str) -> np.ndarray | None:
    buffer = state["buffers"].get(name)
    if buffer is not None and not buffer.flags.writeable:
        buffer = state["buffers"][name] = buffer.copy()
    return buffer


def on_fault(state: dict[str, Any], ctx: Context, record: dict[str, Any], phase: str) -> None:
    if phase == "start":
        state["faults_seen"] += 1


HOOKS = fabric.Hooks(on_crash=on_crash, on_restart=on_restart, find_buffer=find_buffer, on_fault=on_fault)


# -- end of run -----------------------------------------------------------------------------------


def weights_hash(state: dict[str, Any]) -> str:
    return xxhash.xxh3_64_hexdigest(state["buffers"]["weights"].tobytes())


def on_end(world: World, ctx: Context) -> None:
    ranks = [name for name in world.nodes if world.roles[name] == "rank"]
    behind = [name for name in ranks if not world.nodes[name]["done"]]
    if behind:
        ctx.fail(
            "hang",
            f"{len(behind)} ranks did not finish, first {behind[0]}",
            site="example.end",
            node=behind[0],
        )
        return
    hashes = {name: weights_hash(world.nodes[name]) for name in ranks}
    first = hashes[ranks[0]]
    differing = [name for name in ranks if hashes[name] != first]
    if differing:
        ctx.fail(
            "divergence",
            f"weights of {differing[0]} differ from {ranks[0]}",
            site="example.end",
            node=differing[0],
        )


def summarize(world: World) -> dict[str, Any]:
    first = world.nodes[rank_name(0)]
    return {"steps": first["step"], "weights_hash": weights_hash(first), **fabric.summary(world)}


SCENARIO = Scenario(
    name="fabric_example",
    summary="toy data-parallel training over the fabric: GPU streams, an open allreduce kernel, pull retries",
    params=(
        Param("ranks", "int", 8, "GPUs", minimum=2),
        Param("steps", "int", 3, "training steps", minimum=1),
        Param("params", "int", 64, "model size (float32 values)", minimum=1),
        Param("retry", "time", 200_000, "pull missing gradients after this long"),
        Param("bug", "str", "none", "planted bug", choices=("none", "missing_wait")),
        *fabric.fabric_params(gpus_per_host=4, faults_window=300_000),
    ),
    build=build,
    handlers=fabric.with_handlers(
        {
            "rank": {
                "start": on_start,
                "backward_done": on_backward_done,
                "allreduce_started": on_allreduce_started,
                "grad": on_grad,
                "need": on_need,
                "retry": on_retry,
                "update_done": on_update_done,
            }
        },
        HOOKS,
    ),
    transport=fabric.transport,
    on_end=on_end,
    summarize=summarize,
    view=ScenarioView(rank_role="rank", step_key="step", fault_states=fabric.VIEW_STATES),
)
