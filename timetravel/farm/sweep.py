"""A sweep: plan it in the parent, hand the seeds to an executor, commit each row as it arrives.

The plan resolves the scenario and config once, in the parent, so bad input fails before any
worker starts, and so the database learns exactly which ``--set`` strings (swarm included) made
the config: that is what findings print to reopen a seed. Seeds already in the database for this
scenario and config are skipped, which is all that resuming takes.

Swarm testing is on by default for scenarios whose ``faults`` key accepts ``swarm``: unless the
user (or the preset they chose) sets ``faults``, the sweep adds ``faults=swarm`` to its settings,
so each seed draws its own subset of fault kinds and rates.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from timetravel.farm.database import FindingsDatabase, Sweep
from timetravel.farm.executor import Executor
from timetravel.farm.job import SeedJob, check_row, config_hash
from timetravel.farm.local_pool import LocalPool
from timetravel.farm.progress import ProgressBar
from timetravel.farm.record import RecordOptions, record_failures, recording_jobs
from timetravel.farm.seeds import SeedSet, Shard
from timetravel.recording.files import partial_path
from timetravel.scenarios import get_scenario, load_target
from timetravel.sim.fingerprint import code_fingerprint
from timetravel.sim.scenario import ConfigError, Scenario

SWARM_KEY = "faults"
SWARM_VALUE = "swarm"

STOP_DONE = "done"
STOP_TIME_BUDGET = "time_budget"
STOP_INTERRUPTED = "interrupted"


@dataclass(frozen=True)
class SweepPlan:
    sweep: Sweep
    seeds: SeedSet
    shard: Shard
    code_fingerprint: str
    seed_timeout_s: float | None = None
    scripts_named: tuple[str, ...] = ()
    """Scripts named on the planning command line; only these may run (torch sweeps)."""

    def job(self, seed: int) -> SeedJob:
        return SeedJob(
            scenario=self.sweep.scenario,
            settings=self.sweep.settings,
            config_hash=self.sweep.config_hash,
            seed=seed,
            code_fingerprint=self.code_fingerprint,
            scenario_target=self.sweep.scenario_target,
            seed_timeout_s=self.seed_timeout_s,
            scripts_named=self.scripts_named,
        )


@dataclass
class SweepSummary:
    """What ``timetravel fuzz --json`` prints: this run, and the sweep as the database now holds it."""

    scenario: str
    config_hash: str
    settings: list[str]
    swarm: bool
    seeds: str
    shard: str
    db: str
    executor: str
    workers: int
    seeds_in_sweep: int
    already_done: int
    ran: int = 0
    duplicates: int = 0
    stopped: str = STOP_DONE
    remaining: int = 0
    wall_s: float = 0.0
    seeds_per_s: float = 0.0
    outcomes: dict[str, int] = field(default_factory=dict)
    failing: int = 0
    signatures: dict[str, int] = field(default_factory=dict)
    worker_deaths: int = 0
    retries: int = 0
    killed_for_timeout: int = 0
    other_code_rows: int = 0
    recordings: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def load_scenario(name: str, target: str | None) -> Scenario:
    return load_target(target) if target else get_scenario(name)


def supports_swarm(scenario: Scenario, settings: Sequence[str] = ()) -> bool:
    """Whether the scenario's ``faults`` key accepts ``swarm``.

    A key with a fixed set of choices says so itself. A free-form key (a JSON schedule) can only
    be asked by building a world with ``faults=swarm``: a scenario that does not know the word
    rejects it there (with any exception: this is a probe, and the sweep runs without swarm).
    """
    try:
        param = scenario.param(SWARM_KEY)
        param.parse(SWARM_VALUE)
    except ConfigError:
        return False
    if param.choices:
        return True
    try:
        scenario.build(scenario.resolve_config([*settings, f"{SWARM_KEY}={SWARM_VALUE}"]), 0)
    except Exception:
        return False
    return True


def swarm_settings(scenario: Scenario, settings: Sequence[str]) -> tuple[tuple[str, ...], bool]:
    """The settings with ``faults=swarm`` added when the scenario supports it and nothing set ``faults``.

    Returns the settings and whether the resolved config runs a swarm schedule.
    """
    named = {setting.partition("=")[0].strip() for setting in settings}
    preset = scenario.resolve_config(settings).get("preset")
    preset_values = scenario.presets.get(preset, {}) if isinstance(preset, str) else {}
    if SWARM_KEY not in named and SWARM_KEY not in preset_values and supports_swarm(scenario, settings):
        settings = (*settings, f"{SWARM_KEY}={SWARM_VALUE}")
    config = scenario.resolve_config(settings)
    return tuple(settings), config.get(SWARM_KEY) == SWARM_VALUE


def plan_sweep(
    scenario_name: str,
    settings: Sequence[str],
    seeds: SeedSet,
    shard: Shard | None = None,
    *,
    scenario_target: str | None = None,
    swarm: bool = True,
    seed_timeout_s: float | None = None,
    scripts_named: tuple[str, ...] = (),
) -> SweepPlan:
    """Resolve the scenario and config (raising ConfigError on bad input) and fix the seeds."""
    scenario = load_scenario(scenario_name, scenario_target)
    if swarm:
        effective, swarming = swarm_settings(scenario, settings)
    else:
        effective = tuple(settings)
        swarming = scenario.resolve_config(effective).get(SWARM_KEY) == SWARM_VALUE
    config = scenario.resolve_config(effective)
    sweep = Sweep(scenario.name, config_hash(config), effective, config, scenario_target, swarming)
    if seed_timeout_s is not None and seed_timeout_s <= 0:
        raise ValueError("--seed-timeout must be a positive number of seconds")
    return SweepPlan(
        sweep,
        seeds,
        shard or Shard(),
        code_fingerprint(scenario.build.__module__),
        seed_timeout_s,
        scripts_named,
    )


def run_sweep(
    plan: SweepPlan,
    database: FindingsDatabase,
    executor: Executor,
    *,
    time_budget_s: float | None = None,
    progress: Callable[[int, str], ProgressBar | None] | None = None,
    record: RecordOptions | None = None,
    recording_pool: Callable[[], Executor] | None = None,
) -> SweepSummary:
    """Run every seed of the plan that the database lacks; commit one row per seed as it finishes.

    Then, with ``record``, record the earliest failing seeds of each signature (farm/record.py),
    on ``executor`` when it is a local pool, else on ``recording_pool()`` (a local pool: the
    recordings belong next to the database). Ctrl-C (KeyboardInterrupt) stops either phase:
    workers are stopped, every committed row stays, and the summary says ``stopped:
    interrupted``. Past ``time_budget_s`` no new seed (or recording) starts.
    """
    summary = _new_summary(plan, database, executor)
    started = time.monotonic()

    def stop() -> bool:
        return time_budget_s is not None and time.monotonic() - started > time_budget_s

    outcomes: Counter[str] = Counter()
    recorder = None
    partials: list[Path] = []
    try:
        _run_seeds(plan, database, executor, summary, outcomes, stop, progress)
        if record is not None and summary.stopped == STOP_DONE:
            if executor.name == LocalPool.name:
                recorder = executor
            else:
                executor.close()
                recorder = recording_pool() if recording_pool else LocalPool()
            _record(plan, database, recorder, record, summary, stop, progress, partials)
    except KeyboardInterrupt:
        summary.stopped = STOP_INTERRUPTED
    finally:
        executor.close()
        if recorder is not None:
            recorder.close()
        for partial in partials:  # a recording cut short by Ctrl-C or a killed worker
            partial.unlink(missing_ok=True)
    _finish_summary(summary, plan, database, outcomes, executor, time.monotonic() - started)
    return summary


def _new_summary(plan: SweepPlan, database: FindingsDatabase, executor: Executor) -> SweepSummary:
    sweep = plan.sweep
    database.add_sweep(sweep)
    done = database.done_seeds(sweep.scenario, sweep.config_hash)
    return SweepSummary(
        scenario=sweep.scenario,
        config_hash=sweep.config_hash,
        settings=list(sweep.settings),
        swarm=sweep.swarm,
        seeds=str(plan.seeds),
        shard=str(plan.shard),
        db=str(database.path),
        executor=executor.name,
        workers=executor.workers,
        seeds_in_sweep=plan.seeds.count_in(plan.shard),
        already_done=sum(1 for seed in done if seed in plan.seeds and plan.shard.owns(seed)),
        other_code_rows=database.other_code_rows(sweep.scenario, sweep.config_hash, plan.code_fingerprint),
    )


def _run_seeds(
    plan: SweepPlan,
    database: FindingsDatabase,
    executor: Executor,
    summary: SweepSummary,
    outcomes: Counter[str],
    stop: Callable[[], bool],
    progress: Callable[[int, str], ProgressBar | None] | None,
) -> None:
    """The sweep phase: every seed the database lacks, one committed row each."""
    done = database.done_seeds(plan.sweep.scenario, plan.sweep.config_hash)
    to_run = summary.seeds_in_sweep - summary.already_done
    bar = progress(to_run, plan.sweep.scenario) if progress and to_run else None
    try:
        for row in executor.run(_jobs(plan, done), stop):
            committed = database.add_row(check_row(row))
            summary.ran += committed
            summary.duplicates += not committed
            outcomes[row["outcome"]] += committed
            if bar is not None:
                bar.update(summary.ran, summary.ran - outcomes["pass"])
    finally:
        if bar is not None:
            bar.finish()
    summary.stopped = STOP_TIME_BUDGET if stop() and summary.ran < to_run else STOP_DONE


def _record(
    plan: SweepPlan,
    database: FindingsDatabase,
    executor: Executor,
    options: RecordOptions,
    summary: SweepSummary,
    stop: Callable[[], bool],
    progress: Callable[[int, str], ProgressBar | None] | None,
    partials: list[Path],
) -> None:
    """The recording phase: the earliest failing seeds of each signature, recorded and checked.

    ``partials`` receives the ``.partial`` paths the workers may leave behind, for the caller to remove
    once every worker is stopped.
    """
    where, parameters = seed_filter(plan)
    jobs = recording_jobs(
        database,
        lambda seed, path: replace(plan.job(seed), record_path=path, record_force=options.force),
        where,
        parameters,
        options,
    )
    partials += [partial_path(Path(str(job.record_path))) for job in jobs]
    bar = progress(len(jobs), f"{plan.sweep.scenario} recordings") if progress and jobs else None
    order = {job.seed: index for index, job in enumerate(jobs)}
    try:
        for entry in record_failures(database, jobs, executor, stop, bar):
            summary.recordings.append(entry)
    finally:
        summary.recordings.sort(key=lambda entry: order[entry["seed"]])
        if bar is not None:
            bar.finish()


def _jobs(plan: SweepPlan, done: set[int]) -> Iterator[SeedJob]:
    for seed in plan.seeds.in_shard(plan.shard):
        if seed not in done:
            yield plan.job(seed)


def _finish_summary(
    summary: SweepSummary,
    plan: SweepPlan,
    database: FindingsDatabase,
    outcomes: Counter[str],
    executor: Executor,
    wall_s: float,
) -> None:
    summary.wall_s = round(wall_s, 3)
    summary.seeds_per_s = round(summary.ran / wall_s, 3) if wall_s > 0 else 0.0
    summary.outcomes = dict(sorted(outcomes.items()))
    summary.worker_deaths = executor.stats.worker_deaths
    summary.retries = executor.stats.retries
    summary.killed_for_timeout = executor.stats.killed_for_timeout
    signatures: Counter[str] = Counter()
    done_in_sweep = 0
    where, parameters = seed_filter(plan)
    for signature, count in database.connection.execute(
        f"SELECT signature, count(*) FROM seeds WHERE {where} GROUP BY signature", parameters
    ):
        done_in_sweep += count
        if signature is not None:
            signatures[signature] = count
    summary.remaining = summary.seeds_in_sweep - done_in_sweep
    summary.failing = sum(signatures.values())
    summary.signatures = dict(signatures.most_common())


def seed_filter(plan: SweepPlan) -> tuple[str, tuple[Any, ...]]:
    """An SQL condition (and its parameters) for the rows of this plan's config, seeds and shard."""
    ranges = " OR ".join("(seed >= ? AND seed < ?)" for _ in plan.seeds.ranges)
    parameters: list[Any] = [plan.sweep.scenario, plan.sweep.config_hash]
    for part in plan.seeds.ranges:
        parameters += [part.start, part.stop]
    parameters += [plan.shard.count, plan.shard.index]
    return f"scenario = ? AND config_hash = ? AND ({ranges}) AND seed % ? = ?", tuple(parameters)
