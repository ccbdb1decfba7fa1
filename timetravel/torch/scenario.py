"""The scenario ``torch``: the user's torch.distributed script as N ranks under the World.

Nodes: ``r0`` … ``rN-1`` (role ``rank``: the user's processes, through :mod:`driver`) and ``c10d``
(role ``collectives``: the simulated backend, pure data). Events:

* ``rank.poll`` — the rank is running; the handler reads its calls to the World in order until it
  blocks (a ``wait``) or ends (``exit``), and schedules each call as an event on ``c10d`` at the rank's
  logical time: what it reported plus the compute model (``compute_interval`` + a ``torch.compute``
  jitter choice in ``[0, compute_jitter]``), so ranks doing identical work arrive in a seeded order;
* ``c10d.call`` / ``c10d.wait`` / ``c10d.step`` / ``c10d.exit`` — see :mod:`timetravel.torch.c10d`.

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

from timetravel.fabric.params import FABRIC_PARAMS
from timetravel.sim.context import Context
from timetravel.sim.event import Event
from timetravel.sim.guard.state import MODE_OFF
from timetravel.sim.scenario import ConfigError, Param, Scenario
from timetravel.sim.world import World
from timetravel.torch import c10d, store, workdir
from timetravel.torch.faults import active, hit, parse_faults
from timetravel.torch.limits import NPROC_MAX, STUCK_TIMEOUT_S_DEFAULT
from timetravel.torch.wire import ChannelClosed, ProtocolError

SCRIPT_BYTES_MAX = 64 * 1024 * 1024
C10D_NODE = "c10d"
_FABRIC_KEYS = ("nvlink_latency", "network_latency", "uplink_latency", "nvlink_gbyte_per_s", "nic_gbit_per_s")
_authorized_scripts: set[str] = set()

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
    *(param for param in FABRIC_PARAMS if param.name in _FABRIC_KEYS),
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
            raise ConfigError(
                f"function {config['function']!r} was not named by timetravel.torch.simulate in this process"
            )
        return None
    text = config["script"]
    if not text:
        raise ConfigError(
            "the torch scenario needs a script: --set script=PATH (or timetravel torchrun SCRIPT)"
        )
    path = Path(text)
    if not path.is_file():
        raise ConfigError(f"script {text!r} is not a file")
    if path.suffix != ".py":
        raise ConfigError(f"script {text!r} is not a Python file (.py)")
    if path.stat().st_size > SCRIPT_BYTES_MAX:
        raise ConfigError(f"script {text!r} is larger than {SCRIPT_BYTES_MAX} bytes")
    if str(path.resolve()) not in _authorized_scripts:
        raise ConfigError(
            f"script {text!r} was not named on the command line: a recording or database never runs code "
            "(name it: timetravel torchrun SCRIPT, or --set script=SCRIPT on run, fuzz, check-determinism, faults)"
        )
    try:
        shlex.split(config["args"])
    except ValueError as error:
        raise ConfigError(f"config key 'args': {error}") from None
    return path


def build(config: dict[str, Any], seed: int) -> World:
    from timetravel.torch import driver

    driver.stop_active()  # a new run: the previous run's ranks end here
    workdir.close_active()
    script = _check_script(config)
    workdir_sha256 = workdir.source_digest(config["workdir"])
    world = World("torch", config, seed)
    ranks = config["nproc"] * config["nnodes"]
    world.faults = parse_faults(config["faults"], ranks)
    world.fabric = {"fault_hits": {}}
    for rank in range(ranks):
        world.add_node(f"r{rank}", "rank", {"status": "new", "t_ns": 0, "calls": 0, "incarnation": 0})
    digest = script_digest(str(script)) if script is not None else config["function"]
    initial = {**c10d.initial_state(ranks, digest), "workdir_sha256": workdir_sha256}
    world.add_node(C10D_NODE, "collectives", initial)
    world.add_node(store.STORE_NODE, "store", store.initial_state())
    for rank in range(ranks):
        world.schedule(0, f"r{rank}", "poll", 0)
    return world


def rank_specs(config: dict[str, Any], seed: int, restarts: int = 0, *, cwd: str) -> list[dict[str, Any]]:
    """What each forked rank is told: its environment, argv, settings and working directory ``cwd``
    (plain data)."""
    ranks = config["nproc"] * config["nnodes"]
    script = str(Path(config["script"]).resolve()) if config["script"] else ""
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
                "settings": {"detect_divergence": config["detect_divergence"], "compile": config["compile"]},
            }
        )
    return specs


_output_stream: Any = None


def set_rank_output(stream: Any) -> None:
    """Where ranks' prefixed output goes (torchrun --json sends it to stderr); None: stdout."""
    global _output_stream
    _output_stream = stream


def _driver(ctx: Context) -> Any:
    from timetravel.torch import driver

    live = driver.active()
    if live is None or live.run_token != id(ctx.world):
        config = ctx.world.config
        stream = None if config["rank_output"] == "quiet" else (_output_stream or sys.stdout)
        specs = rank_specs(config, ctx.world.seed, cwd=working_directory(ctx).path)
        live = driver.RankDriver(specs, output=stream, stuck_timeout_s=config["stuck_timeout"])
        live.run_token = id(ctx.world)
        live.start()
    return live


def working_directory(ctx: Context) -> workdir.WorkingDirectory:
    """This execution's private working directory (a copy of ``workdir``, made on first use)."""
    return workdir.open_for_run(id(ctx.world), ctx.world.config["workdir"])


def on_poll(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """Read the rank's calls until it blocks; each becomes an event at its logical time."""
    rank = int(ctx.node[1:])
    if event.payload != state["incarnation"]:
        return  # a poll of a rank process a restart has replaced
    live = _driver(ctx)
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
        if kind == "output":
            live.emit(rank, message["stream"], message["lines"])
            continue
        t_ns = max(state["t_ns"], int(message["t_ns"]))
        if kind in ("call", "exit"):
            interval = ctx.world.config["compute_interval"]
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
        if kind not in ("call", "wait", "step", "exit"):
            ctx.fail("exception", f"{ctx.node} sent an unknown message kind {kind!r}", "torch.rank.protocol")
            return
        ctx.deliver(t_ns, C10D_NODE, kind, message)
        if kind == "wait":
            state["status"] = "waiting"
            return
        if kind == "exit":
            state["status"] = "exited"
            return


def on_restart(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """A torchelastic restart reached this rank: a fresh process, a fresh state, then run it."""
    state.update(status="new", t_ns=ctx.now, calls=0, incarnation=event.payload)
    on_poll(state, event, ctx)


def on_metric(state: dict[str, Any], event: Event, ctx: Context) -> None:
    name, value, _step = event.payload  # the logical time orders a metric; the script's step is not kept
    ctx.metric(str(name), value)


def on_end(world: World, ctx: Context) -> None:
    """The queue drained: ranks still waiting in a collective are a hang; then the ranks end."""
    from timetravel.torch import driver

    try:
        c10d.report_hang(world, ctx)
    finally:
        driver.stop_active()
        workdir.close_active()


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


SCENARIO = Scenario(
    name="torch",
    summary="your torch.distributed script as N ranks: time, network, arrival order and faults from the World",
    params=PARAMS,
    build=build,
    handlers={
        "rank": {"poll": on_poll, "metric": on_metric, "restart": on_restart},
        "collectives": c10d.HANDLERS,
        "store": store.HANDLERS,
    },
    on_end=on_end,
    summarize=summarize,
    determinism=MODE_OFF,
)
