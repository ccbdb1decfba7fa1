"""The scenario ``torch``: the user's torch.distributed script as N ranks under the World.

Nodes: ``r0`` … ``rN-1`` (role ``rank``: the user's processes, through :mod:`driver`) and ``c10d``
(role ``collectives``: the simulated backend, pure data). Events:

* ``rank.poll`` — the rank is running; the handler reads its calls to the World in order until it
  blocks (a ``wait``) or ends (``exit``), and schedules each call as an event on ``c10d`` at the rank's
  logical time: what it reported plus the compute model (``compute_interval`` + a ``torch.compute``
  jitter choice in ``[0, compute_jitter]``), so ranks doing identical work arrive in a seeded order;
* ``c10d.call`` / ``c10d.wait`` / ``c10d.step`` / ``c10d.exit`` — see :mod:`timetravel.torch.world.c10d`.

When a collective completes, its results go to the ranks at once (they only depend on the result and
its logical completion time, so a rank may run ahead in wall time without changing a bit), and the
rank's next ``poll`` is scheduled at that time: ranks run in parallel between collectives.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import sys
from pathlib import Path
from typing import Any

import xxhash

from timetravel.sim.context import Context
from timetravel.sim.event import Event
from timetravel.sim.guard.state import MODE_OFF
from timetravel.sim.scenario import ConfigError, NotAuthorizedError, Param, Scenario
from timetravel.sim.world import World
from timetravel.torch.protocol.limits import (
    COMPUTE_FLOPS_PER_S_DEFAULT,
    NPROC_MAX,
    SNAPSHOT_EVERY_EVENTS_TORCH,
    STUCK_TIMEOUT_S_DEFAULT,
    WORK_NS_MAX,
)
from timetravel.torch.protocol.wire import ChannelClosed, ProtocolError
from timetravel.torch.world import c10d, digests, hangs, module_probe, resume, store, timing, workdir
from timetravel.torch.world import state as training_state
from timetravel.torch.world.faults import active, hit, parse_faults
from timetravel.torch.world.timing import FABRIC_TORCH_PARAMS

SCRIPT_BYTES_MAX = 64 * 1024 * 1024
STATE_BYTES_MAX_DEFAULT = 64 * 1024 * 1024
C10D_NODE = "c10d"
_authorized_scripts: set[str] = set()
script_paths: dict[str, str] = {}
"""A recording's script (resolved) -> the file the user named with --script (torch/recorded_script.py)."""
script_refusals: dict[str, str] = {}
"""A recording's script opened without --script -> the one line saying what to pass instead."""

PARAMS: tuple[Param, ...] = (
    Param("script", "str", "", "the training script to run as every rank (you name it: it is code)"),
    Param("function", "str", "", "instead of a script: module:function to run as every rank (Python API)"),
    Param("args", "str", "", "the script's own arguments, as one shell-quoted string"),
    Param(
        "workdir",
        "str",
        "",
        "the ranks' private working directory starts as a copy of this directory ('' = empty)",
    ),
    Param("nproc", "int", 2, "ranks per host (torchrun --nproc-per-node)", minimum=1),
    Param("nnodes", "int", 1, "hosts (torchrun --nnodes); ranks = nproc x nnodes", minimum=1),
    Param(
        "env_style",
        "str",
        "torchrun",
        "environment given to ranks: torchrun, or slurm (adds SLURM_*)",
        choices=("torchrun", "slurm"),
    ),
    Param(
        "hang_timeout",
        "time",
        600_000_000_000,
        "a rank waiting this long in a collective is a hang (logical time)",
    ),
    Param(
        "compute_interval", "time", 100_000, "compute charged between two calls to the World (logical time)"
    ),
    Param(
        "compute_model",
        "str",
        "fixed",
        "compute between calls: fixed (compute_interval only) or flops (plus the products' flops at "
        "compute_flops_per_s; docs/torch.md)",
        choices=("fixed", "flops"),
    ),
    Param(
        "compute_flops_per_s",
        "int",
        COMPUTE_FLOPS_PER_S_DEFAULT,
        "the simulated GPU's sustained rate under compute_model=flops",
        minimum=1,
    ),
    Param(
        "compute_jitter",
        "time",
        10_000,
        "bound of the seeded jitter added to each interval (choice torch.compute)",
    ),
    Param(
        "reduce_order",
        "str",
        "canonical",
        "summation order: canonical (rank order) or arrival (the order contributions reach the reducer)",
        choices=("canonical", "arrival"),
        branchable=True,
    ),
    Param(
        "compile",
        "str",
        "eager",
        "torch.compile inside ranks: eager (any backend runs eagerly: no compiler in the simulator) or inductor",
        choices=("eager", "inductor"),
    ),
    Param("detect_nan", "bool", True, "fail at the first collective a rank feeds a NaN or Inf"),
    Param(
        "detect_divergence", "bool", True, "fail when data-parallel replicas' parameters differ after a step"
    ),
    Param(
        "detect_resume_mismatch",
        "bool",
        True,
        "after a crash fault and a restart, fail when the run differs from the same seed's run without "
        "the crash (costs one more run of the script, only then)",
    ),
    Param(
        "state_every_steps",
        "int",
        1,
        "store params, optimizer state and local grads every this many optimizer steps; 0 = off "
        "(sweeps may pass 0 to go faster)",
        minimum=0,
    ),
    Param(
        "state_bytes_max",
        "int",
        STATE_BYTES_MAX_DEFAULT,
        "per rank and step: above this many bytes of state only digests are kept (warning state_too_large)",
        minimum=0,
    ),
    Param(
        "stuck_timeout",
        "float",
        STUCK_TIMEOUT_S_DEFAULT,
        "wall seconds a rank may run without calling the World",
        minimum=0.1,
    ),
    Param(
        "max_restarts",
        "int",
        0,
        "restart every rank after a crash or exception, this many times (torchelastic --max-restarts)",
        minimum=0,
    ),
    Param(
        "restart_delay", "time", 1_000_000, "logical time between a failure and the restarted ranks' start"
    ),
    Param(
        "faults",
        "json",
        [],
        "fault records at the collective layer (docs/torch.md, Faults), inline or @file.json",
    ),
    Param(
        "rank_output",
        "str",
        "show",
        "ranks' stdout/stderr: show (prefixed [rN]) or quiet",
        choices=("show", "quiet"),
    ),
    *FABRIC_TORCH_PARAMS,
)


def authorize_script(path: str) -> None:
    """The user named this script on the command line: runs of it may execute it."""
    _authorized_scripts.add(str(Path(path).resolve()))


def authorize_function(target: str) -> None:
    """``timetravel.torch.simulate(fn)`` named this function in Python: runs of it may call it."""
    _authorized_scripts.add(f"function:{target}")


def script_digest(path: str) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _check_script(config: dict[str, Any]) -> Path | None:
    ranks = config["nproc"] * config["nnodes"]
    if ranks > NPROC_MAX:
        raise ConfigError(f"{ranks} ranks is above the limit {NPROC_MAX}")
    if config["function"]:
        if f"function:{config['function']}" not in _authorized_scripts:
            raise NotAuthorizedError(
                f"function {config['function']!r} was not named by timetravel.torch.simulate in this process"
            )
        return None
    text = config["script"]
    if not text:
        raise ConfigError(
            "the torch scenario needs a script: --set script=PATH (or timetravel torchrun SCRIPT)"
        )
    if str(Path(text).resolve()) in script_refusals:
        raise NotAuthorizedError(script_refusals[str(Path(text).resolve())])
    path = Path(script_paths.get(str(Path(text).resolve()), text))
    if not path.is_file():
        raise ConfigError(f"script {text!r} is not a file")
    if path.suffix != ".py":
        raise ConfigError(f"script {text!r} is not a Python file (.py)")
    if path.stat().st_size > SCRIPT_BYTES_MAX:
        raise ConfigError(f"script {text!r} is larger than {SCRIPT_BYTES_MAX} bytes")
    if str(path.resolve()) not in _authorized_scripts:
        raise NotAuthorizedError(
            f"script {text!r} was not named on the command line: a recording or database never runs code "
            "(name it: timetravel torchrun SCRIPT, or --set script=SCRIPT on run, fuzz, check-determinism, faults)"
        )
    try:
        shlex.split(config["args"])
    except ValueError as error:
        raise ConfigError(f"config key 'args': {error}") from None
    return path


def build(config: dict[str, Any], seed: int) -> World:
    from timetravel.torch.world import driver

    if not driver.in_session[0]:
        driver.stop_active()  # a new run outside a Session: the previous run's ranks end here
    script = _check_script(config)
    workdir_sha256 = workdir.source_digest(config["workdir"])
    world = World("torch", config, seed)
    ranks = config["nproc"] * config["nnodes"]
    world.faults = parse_faults(config["faults"], ranks)
    world.fabric = {**timing.fabric_state(config), "fault_hits": {}}
    for rank in range(ranks):
        world.add_node(f"r{rank}", "rank", _rank_state(0, 0))
    digest = script_digest(str(script)) if script is not None else config["function"]
    initial = {**c10d.initial_state(ranks, digest), "workdir_sha256": workdir_sha256}
    world.add_node(C10D_NODE, "collectives", initial)
    world.add_node(store.STORE_NODE, "store", store.initial_state())
    for rank in range(ranks):
        world.schedule(0, f"r{rank}", "poll", 0)
    return world


def _rank_state(t_ns: int, incarnation: int) -> dict[str, Any]:
    """A rank node: where its process is, and a digest of everything the World ever handed it.

    ``delivered`` counts the results its polls handed over (the process may hold one more, on its way:
    :func:`released`); c10d chains their digests (``received``), so two worlds that agree on both gave
    their rank processes the same inputs."""
    return {
        "status": "new",
        "t_ns": t_ns,
        "calls": 0,
        "incarnation": incarnation,
        "delivered": 0,
        "outbox": {},
    }


def rank_specs(config: dict[str, Any], seed: int, restarts: int = 0, *, cwd: str) -> list[dict[str, Any]]:
    """What each forked rank is told: its environment, argv, settings and working directory ``cwd``
    (plain data)."""
    ranks = config["nproc"] * config["nnodes"]
    checked = _check_script(config)  # branches, fan-outs and seeks start ranks without build: same opt-in
    script = str(checked.resolve()) if checked is not None else ""
    specs = []
    base = {
        key: value for key, value in os.environ.items() if not key.startswith(("SLURM_", "TORCHELASTIC_"))
    }
    for rank in range(ranks):
        local = rank % config["nproc"]
        env = dict(base)
        env.update(
            RANK=str(rank),
            WORLD_SIZE=str(ranks),
            LOCAL_RANK=str(local),
            LOCAL_WORLD_SIZE=str(config["nproc"]),
            GROUP_RANK=str(rank // config["nproc"]),
            ROLE_RANK=str(rank),
            ROLE_WORLD_SIZE=str(ranks),
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT="29500",
            TORCHELASTIC_RESTART_COUNT=str(restarts),
            TORCHELASTIC_RUN_ID=f"timetravel-{seed}",
            TORCH_DIST_INIT_BARRIER="0",
            OMP_NUM_THREADS="1",
            TIMETRAVEL_RANK=str(rank),
            TIMETRAVEL_LAUNCH_DIR=os.getcwd(),
            PWD=cwd,
        )
        if config["env_style"] == "slurm":
            env.update(
                SLURM_PROCID=str(rank),
                SLURM_LOCALID=str(local),
                SLURM_NTASKS=str(ranks),
                SLURM_NODEID=str(rank // config["nproc"]),
            )
        specs.append(
            {
                "rank": rank,
                "env": env,
                "script": script,
                "function": config["function"],
                "sys_path": [os.path.abspath(entry) for entry in sys.path] if config["function"] else [],
                "cwd": cwd,
                "args": shlex.split(config["args"]),
                "seed": seed,
                "restarts": restarts,
                "settings": {
                    "detect_divergence": config["detect_divergence"],
                    "detect_resume_mismatch": config["detect_resume_mismatch"],
                    "compile": config["compile"],
                    "compute_model": config["compute_model"],
                    "compute_flops_per_s": config["compute_flops_per_s"],
                    "state_every_steps": config["state_every_steps"],
                    "state_bytes_max": config["state_bytes_max"],
                    **module_probe.settings_for(rank),  # explain's module probe (read-only hooks)
                },
            }
        )
    return specs


_output_stream: Any = None


def set_rank_output(stream: Any) -> None:
    """Where ranks' prefixed output goes (torchrun --json sends it to stderr); None: stdout."""
    global _output_stream
    _output_stream = stream


def _driver(ctx: Context) -> Any:
    """The live ranks of this world: already bound, resumed from a checkpoint, or started fresh."""
    from timetravel.torch.world import driver

    live = driver.driver_for(ctx.world)
    if live is not None:
        return live
    attached = driver.take_attachment(ctx.world)
    if attached is not None:
        return attached()
    if any(state["status"] != "new" for state in _rank_states(ctx.world)):
        raise driver.RankStartError(
            f"no rank processes for this world at #{ctx.world.events_processed}: its ranks already ran, "
            "and nothing can resume them here (re-execute from the start, or from a checkpoint)"
        )
    return new_driver(ctx.world, spawn=True)


def new_driver(world: World, *, spawn: bool, directory: workdir.WorkingDirectory | None = None) -> Any:
    """A RankDriver bound to ``world`` (``spawn=False``: the caller resumes ranks into it).

    Its ranks run in ``directory`` (a resumed checkpoint's, whose files the caller restored), or in
    a new private working directory, a copy of the ``workdir`` setting (torch/workdir.py)."""
    from timetravel.torch.world import driver

    config = world.config
    stream = None if config["rank_output"] == "quiet" else (_output_stream or sys.stdout)
    restarts = world.nodes[C10D_NODE]["restarts"]
    if directory is None:
        directory = workdir.WorkingDirectory.create(config["workdir"] or None)
    specs = rank_specs(config, world.seed, restarts, cwd=directory.path)
    live = driver.RankDriver(specs, output=stream, stuck_timeout_s=config["stuck_timeout"])
    live.workdir = directory
    live.world = world
    live.start(spawn=spawn)
    return live


def _rank_states(world: World) -> list[dict[str, Any]]:
    return [world.nodes[f"r{rank}"] for rank in range(world.nodes[C10D_NODE]["ranks"])]


_SPEC_KEYS_EXCLUDED = frozenset(param.name for param in PARAMS if param.branchable) | {"rank_output"}
"""Config a rank process never sees (a branch may change it: the World applies it)."""


def _spec_digest(config: dict[str, Any]) -> str:
    """Everything else in the config: two recordings of one script with other arguments, rank counts
    or settings start different processes, even while the World has handed them the same results."""
    from timetravel.sim.encoding import pack

    kept = {key: config[key] for key in sorted(config) if key not in _SPEC_KEYS_EXCLUDED}
    return xxhash.xxh3_64_hexdigest(pack(kept))


def rank_key(world: World) -> str:
    """What the rank processes of ``world`` are: the seed, the script, the config they start from and,
    per rank, its incarnation and the digest of every result handed to it (see :func:`_rank_state`).
    Per rank it counts the results *released* to it (:func:`released`), not only those its poll
    handed over: a rank's process runs ahead of the World by the result on its way, and two worlds
    whose ranks were handed the same results hold the same processes (once quiesced).
    Config that a branch may change is not part of it: until a change reaches a rank as a different
    result, the process is the same. Checkpoints are shared by every Session of a process, so the
    key must tell apart runs of other recordings too (a run with ``--steps 10`` resumed for one with
    ``--steps 8`` of the same seed trained two steps too many)."""
    c10d_state = world.nodes[C10D_NODE]
    parts = [str(world.seed), str(c10d_state["script_sha256"]), _spec_digest(world.config)]
    for rank, state in enumerate(_rank_states(world)):
        chain = c10d_state["received"].get(str(rank), {})
        handed = released(world, rank)
        parts.append(f"{state['incarnation']}:{handed}:{chain.get(str(handed), '')}")
        parts.append(str(state["status"]))
    return xxhash.xxh3_128_hexdigest("|".join(parts).encode())


def released(world: World, rank: int) -> int:
    """How many results the World has released to ``rank``'s process: its ``delivered`` count, or
    one more while a result is on its way to the rank's poll. The driver sends a result as soon as
    it is released (``RankDriver.offer``), so this is what the process has been handed."""
    delivered = int(world.nodes[f"r{rank}"]["delivered"])
    entry = world.nodes[C10D_NODE]["delivering"].get(str(rank))
    return max(delivered, int(entry["number"])) if entry is not None else delivered


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
    live = _driver(ctx)
    if "delivery" in poll:
        live.deliver(rank, poll["delivery"])
        state["delivered"] = poll["delivery"]
        state["outbox"] = {}  # every call sent before the wait was taken by c10d (earlier events)
    state["status"] = "running"
    state["t_ns"] = max(state["t_ns"], ctx.now)
    while True:
        try:
            message = live.receive(rank)
        except ChannelClosed:
            state["status"] = "crashed"
            died = {"kind": "died", "rank": rank, "incarnation": state["incarnation"]}
            ctx.deliver(ctx.now, C10D_NODE, "died", died)
            return
        except ProtocolError as error:
            ctx.fail("exception", f"{ctx.node} sent a malformed message: {error}", "torch.rank.protocol")
            return
        except TimeoutError as error:
            state["status"] = "stuck"
            ctx.fail("stuck", str(error), "torch.rank.stuck")
            return
        kind = message.get("kind")
        work_ns = message.get("work_ns", 0)
        if type(work_ns) is not int or not 0 <= work_ns <= WORK_NS_MAX:
            ctx.fail("exception", f"{ctx.node} sent a malformed work_ns: {work_ns!r}", "torch.rank.protocol")
            return
        if kind == "output":
            live.emit(rank, message["stream"], message["lines"])
            continue
        if kind == "probe":  # explain's module probe: a side channel, never part of the World
            module_probe.note(rank, message)
            continue
        t_ns = max(state["t_ns"], int(message["t_ns"]))
        if kind in ("call", "exit"):
            interval = ctx.world.config["compute_interval"] + work_ns
            for record in active(ctx, "slow", rank):
                hit(ctx, record, f"compute x{record['params']['compute_factor']:g}")
                interval = int(interval * record["params"]["compute_factor"])
            t_ns += interval
            jitter = ctx.world.config["compute_jitter"]
            if jitter:
                t_ns += ctx.choose("torch.compute", jitter + 1)
        state["t_ns"] = t_ns
        state["calls"] += 1
        message["rank"] = rank
        message["incarnation"] = state["incarnation"]
        if kind == "warning":
            ctx.deliver(t_ns, C10D_NODE, "warning", message)
            continue
        if kind == "metric":
            ctx.deliver(t_ns, ctx.node, "metric", [message["name"], message["value"], message.get("step")])
            continue
        if kind == "batch":
            batch = {key: message[key] for key in ("step", "indices", "dropped", "incarnation")}
            ctx.deliver(t_ns, ctx.node, "batch", batch)
            continue
        if kind == "step":
            training_state.on_step_message(state, message, t_ns, ctx)
        if kind not in ("call", "wait", "step", "exit"):
            ctx.fail("exception", f"{ctx.node} sent an unknown message kind {kind!r}", "torch.rank.protocol")
            return
        if kind == "call" and not _post_inputs(state, message, ctx):
            return
        ctx.deliver(t_ns, C10D_NODE, kind, message)
        if kind == "wait":
            state["status"] = "waiting"
            return
        if kind == "exit":
            state["status"] = "exited"
            return


def _post_inputs(state: dict[str, Any], message: dict[str, Any], ctx: Context) -> bool:
    """Keep a call's tensors in this rank's own ``outbox`` until c10d takes them, not in the event.

    Events are hashed into the chain and stored in batches of thousands; a bucket of gradients in
    every call event would make a batch of a 1M-parameter model's run hundreds of megabytes. In
    the node state they are arrays, paged and deduplicated by the snapshot store."""
    from timetravel.torch.protocol import arrays

    try:
        inputs = [arrays.decode(wire) for wire in message.pop("inputs", [])]
    except arrays.TensorFormatError as error:
        ctx.fail("exception", f"{ctx.node}: {error}", "torch.collective.tensor")
        return False
    state.setdefault("outbox", {})[str(message["id"])] = inputs
    return True


def on_restart(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """A torchelastic restart reached this rank: a fresh process, a fresh state, then run it."""
    state.update(_rank_state(ctx.now, event.payload))
    on_poll(state, event, ctx)


def on_metric(state: dict[str, Any], event: Event, ctx: Context) -> None:
    name, value, _step = event.payload  # the logical time orders a metric; the script's step is not kept
    ctx.metric(str(name), value)


def on_end(world: World, ctx: Context) -> None:
    """The queue drained: ranks still waiting in a collective are a hang; then the ranks end."""
    from timetravel.torch.world import driver

    try:
        hangs.report_hang(world, ctx)
    finally:
        driver.stop_world(world)
    resume.check(world, ctx)  # after the ranks ended: it may run the reference (torch/resume.py)


def summarize(world: World) -> dict[str, Any]:
    state = world.nodes[C10D_NODE]
    warnings = state.get("warnings", {})
    outside = warnings.get("write_outside_workdir")
    first_write_outside = {"first_write_outside_workdir": outside["detail"]} if outside else {}
    return {
        "ranks": state["ranks"],
        "collectives": state["completed"],
        "optimizer_steps": state["steps_checked"],
        "script_sha256": state["script_sha256"][:16],
        "warnings": sorted(warnings),
        **first_write_outside,
        "restarts": state["restarts"],
    }


def _repro_setup(config: dict[str, Any]) -> tuple[str, str]:
    from timetravel.torch.world.recorded_script import repro_setup

    return repro_setup(config)


def _torch_worlds(session: Any) -> Any:
    from timetravel.torch.world.world_source import TorchWorlds

    return TorchWorlds(session)


SCENARIO = Scenario(
    name="torch",
    summary="your torch.distributed script as N ranks: time, network, arrival order and faults from the World",
    params=PARAMS,
    build=build,
    handlers={
        "rank": {
            "poll": on_poll,
            "metric": on_metric,
            "restart": on_restart,
            "state": training_state.on_state,
            "logical": training_state.on_logical,
            "batch": training_state.on_batch,
        },
        "collectives": c10d.HANDLERS,
        "store": store.HANDLERS,
    },
    on_end=on_end,
    summarize=summarize,
    determinism=MODE_OFF,
    world_source=_torch_worlds,
    describe_divergence=digests.describe_divergence,
    divergence_t_ns=digests.divergence_t_ns,
    repro_setup=_repro_setup,
    snapshot_every_events=SNAPSHOT_EVERY_EVENTS_TORCH,
)
