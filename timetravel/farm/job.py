"""One seed of a sweep, as a worker runs it: ``run_seed(job) -> row``.

This is the only code that runs inside workers, on every executor (the local process pool, a
Dask cluster, or the parent for ``verify``), so a row is a pure function of (scenario code,
config, seed): every executor gives the same rows apart from the fields in ``VOLATILE_FIELDS``
(wall time, retries, the recording's path). A job carries the ``--set`` strings rather than a
resolved config, and the worker checks that it resolves them to the config the parent hashed,
so a worker running other code fails loudly instead of filling the database with other answers.

The worker never writes the findings database: it returns the row and the parent commits it.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from typing import Any

from timetravel import __version__
from timetravel.scenarios import get_scenario, load_target
from timetravel.sim.encoding import digest
from timetravel.sim.fingerprint import code_fingerprint
from timetravel.sim.kernel import Simulation
from timetravel.sim.launch import NO_LAUNCH, Launch
from timetravel.sim.runner import run_report
from timetravel.sim.scenario import Scenario
from timetravel.sim.world import World

PAUSE_EVERY_EVENTS = 1024
"""How often a running seed looks at its wall-clock deadline (a call per 1024 events is free)."""
SCENARIO_CACHE_ENTRIES_MAX = 16
OUTCOMES = ("pass", "fail", "timeout", "crash", "error")
"""pass/fail: the simulation's verdict. timeout: past ``--seed-timeout``. crash: the worker
process died on every attempt. error: the scenario's own code raised outside a handler."""
TIMEOUT_SIGNATURE = "timeout:farm.seed_timeout"
CRASH_SIGNATURE = "crash:farm.worker_died"
ROW_FIELDS = (
    "scenario",
    "config_hash",
    "seed",
    "outcome",
    "failure_kind",
    "signature",
    "failure_node",
    "failure_message",
    "fault_kinds",
    "t_ns",
    "events",
    "state_hash",
    "wall_s",
    "attempts",
    "recording",
    "code_fingerprint",
    "version",
)
VOLATILE_FIELDS = ("wall_s", "attempts", "recording")
"""Fields that depend on the machine or on luck, not on (scenario, config, seed, code)."""
MESSAGE_CHARS_MAX = 2_000


class WorkerMismatchError(RuntimeError):
    """A worker resolved the sweep's settings to another config: it runs different code."""


class SeedTimeoutError(Exception):
    """Raised from the pause hook when a seed runs past its wall-clock deadline."""

    def __init__(self, world: World) -> None:
        super().__init__("seed timeout")
        self.t_ns = world.t_ns
        self.events = world.events_processed


@dataclass(frozen=True)
class SeedJob:
    """Everything a worker needs to run one seed (plain values: it crosses process boundaries)."""

    scenario: str
    settings: tuple[str, ...]
    config_hash: str
    seed: int
    code_fingerprint: str
    scenario_target: str | None = None
    seed_timeout_s: float | None = None
    record_path: str | None = None
    """When set, the job records the seed into this path instead (farm/record.py)."""
    record_force: bool = False
    """With ``record_path``: record over a file that exists there (``fuzz --force``)."""
    scripts_named: tuple[str, ...] = ()
    """Scripts the user named on the command line that planned the sweep (a torch run executes only
    those; a database that names a script never makes a worker run it)."""


def config_hash(config: dict[str, Any]) -> str:
    """The hex digest that names a resolved config in the findings database."""
    return digest(config).hex()


@functools.lru_cache(maxsize=SCENARIO_CACHE_ENTRIES_MAX)
def resolve(scenario_name: str, target: str | None, settings: tuple[str, ...]) -> tuple[Scenario, str]:
    """The scenario and the hash of its resolved config (cached: a worker runs many seeds of one sweep)."""
    scenario = load_target(target) if target else get_scenario(scenario_name)
    return scenario, config_hash(scenario.resolve_config(settings))


def job_launch(job: SeedJob) -> Launch:
    """In a worker: what the planning command line launched (sim/launch.py) — the scripts it named may
    run here (a torch sweep); a job names nothing else, and a database never makes one."""
    if not job.scripts_named:
        return NO_LAUNCH
    from timetravel.torch.world.specs import launch_naming

    return launch_naming(job.scripts_named)


def run_seed(job: SeedJob) -> dict[str, Any]:
    """Run one seed without recording and return its row (every field of ``ROW_FIELDS``)."""
    launch = job_launch(job)
    scenario, resolved_hash = resolve(job.scenario, job.scenario_target, job.settings)
    if resolved_hash != job.config_hash:
        raise WorkerMismatchError(
            f"this worker resolves the sweep's settings to config {resolved_hash[:12]}, the sweep has "
            f"{job.config_hash[:12]}: the worker runs different timetravel or scenario code"
        )
    worker_code = code_fingerprint(scenario.build.__module__)
    if worker_code != job.code_fingerprint:
        raise WorkerMismatchError(
            f"this worker runs code {worker_code[:12]}, the sweep runs {job.code_fingerprint[:12]}: "
            "install the same timetravel and scenario code on every worker"
        )
    config = scenario.resolve_config(job.settings)
    started = time.perf_counter()
    on_pause = _deadline_hook(started + job.seed_timeout_s) if job.seed_timeout_s else None
    try:
        report, world = run_report(
            scenario,
            config,
            job.seed,
            pause_every_events=PAUSE_EVERY_EVENTS,
            on_pause=on_pause,
            launch=launch,
        )
    except SeedTimeoutError as timeout:
        return timeout_row(job, time.perf_counter() - started, timeout.t_ns, timeout.events)
    except Exception as error:  # the scenario's own code raised outside a handler (build, on_end)
        return error_row(job, time.perf_counter() - started, error)
    wall_s = time.perf_counter() - started
    failure = report["failure"]
    row = base_row(job, report["outcome"], wall_s)
    row.update(
        t_ns=failure["t_ns"] if failure else report["t_end_ns"],
        events=report["events"],
        state_hash=report["state_hash"],
        fault_kinds=fault_kinds_before(world, failure["t_ns"] if failure else report["t_end_ns"]),
    )
    if failure is not None:
        row.update(
            failure_kind=failure["kind"],
            signature=failure["signature"],
            failure_node=failure["node"],
            failure_message=str(failure["message"])[:MESSAGE_CHARS_MAX],
        )
    return check_row(row)


def _deadline_hook(deadline: float) -> Any:
    def check_deadline(simulation: Simulation) -> None:
        if time.perf_counter() > deadline:
            raise SeedTimeoutError(simulation.world)

    return check_deadline


def fault_kinds_before(world: World, t_ns: int) -> list[str]:
    """The kinds of the fault records that start no later than ``t_ns`` (sorted, unique).

    A fault record names its start as ``t_start_ns`` (or ``t_start``); one without a start time
    counts as present from the beginning.
    """
    kinds = set()
    for fault in world.faults:
        if not isinstance(fault, dict) or not isinstance(fault.get("kind"), str):
            continue
        start = fault.get("t_start_ns", fault.get("t_start", 0))
        if not isinstance(start, int) or start <= t_ns:
            kinds.add(fault["kind"])
    return sorted(kinds)


def base_row(job: SeedJob, outcome: str, wall_s: float) -> dict[str, Any]:
    """A row with the job's keys and every other field empty."""
    row: dict[str, Any] = dict.fromkeys(ROW_FIELDS)
    row.update(
        scenario=job.scenario,
        config_hash=job.config_hash,
        seed=job.seed,
        outcome=outcome,
        fault_kinds=[],
        wall_s=round(wall_s, 6),
        attempts=1,
        code_fingerprint=job.code_fingerprint,
        version=__version__,
    )
    return row


def timeout_row(job: SeedJob, wall_s: float, t_ns: int | None, events: int | None) -> dict[str, Any]:
    """The row of a seed stopped at its deadline (``t_ns``/``events`` unknown after a hard kill)."""
    row = base_row(job, "timeout", wall_s)
    where = f" (stopped at t={t_ns} ns after {events} events)" if events is not None else " (worker killed)"
    row.update(
        failure_kind="timeout",
        signature=TIMEOUT_SIGNATURE,
        failure_message=f"seed ran past --seed-timeout {job.seed_timeout_s:g} s{where}",
        t_ns=t_ns,
        events=events,
    )
    return check_row(row)


def crash_row(job: SeedJob, attempts: int, how: str) -> dict[str, Any]:
    """The row of a seed whose worker died on every attempt."""
    row = base_row(job, "crash", 0.0)
    row.update(
        failure_kind="crash",
        signature=CRASH_SIGNATURE,
        failure_message=f"the worker process died on each of {attempts} attempts ({how})",
        attempts=attempts,
    )
    return check_row(row)


def error_row(job: SeedJob, wall_s: float, error: Exception) -> dict[str, Any]:
    """The row of a seed whose scenario code raised outside a handler (the kernel catches the rest)."""
    row = base_row(job, "error", wall_s)
    row.update(
        failure_kind="exception",
        signature=f"exception:farm.run:{type(error).__name__}",
        failure_message=f"{type(error).__name__}: {error}"[:MESSAGE_CHARS_MAX],
    )
    return check_row(row)


def check_row(row: dict[str, Any]) -> dict[str, Any]:
    """Assert the row's shape (on the worker before sending, and in the parent before committing)."""
    if tuple(row) != ROW_FIELDS:
        raise ValueError(f"a farm row has the fields {ROW_FIELDS}, got {tuple(row)}")
    if row["outcome"] not in OUTCOMES:
        raise ValueError(f"row outcome {row['outcome']!r} is not one of {OUTCOMES}")
    if type(row["seed"]) is not int or not isinstance(row["fault_kinds"], list):
        raise ValueError("a farm row needs an int seed and a list of fault kinds")
    if (row["outcome"] == "pass") != (row["signature"] is None):
        raise ValueError(f"seed {row['seed']}: a row has a signature exactly when it did not pass")
    return row


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    """The row without its volatile fields: what must be equal on every executor."""
    return {key: value for key, value in row.items() if key not in VOLATILE_FIELDS}
