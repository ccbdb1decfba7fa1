"""A real Dask LocalCluster (2 worker processes): the same rows as the local pool and as merged shards.

The watchdog cases on Dask (a stuck handler, a seed that kills every worker) are slow tests:
they wait for Dask's nannies to restart worker processes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import timetravel.farm.executor as executor_module
from timetravel.farm import FindingsDatabase, LocalPool, Shard, comparable, parse_seeds, plan_sweep, run_sweep
from timetravel.farm.record import RecordOptions

pytest.importorskip("distributed", reason="the `cluster` extra (dask.distributed) is not installed")

PINGPONG_SETTINGS = ["rtt_max=2390ns", "rounds=200"]


def dask_executor() -> Any:
    from timetravel.farm.dask_executor import DaskExecutor

    executor = DaskExecutor(workers=2)
    assert executor.workers == 2 and len(executor.client.nthreads()) == 2
    return executor


def stuck_seed_plan(seeds: int) -> Any:
    """Seeds 0..seeds-1 of farm_scenarios' STUCK, seed 2 stuck. The 1 s seed timeout makes a seed
    expire 3 s after its submission (two per worker thread, 1.5 s hard deadline each): a fresh
    worker's imports on a loaded machine took more than the 0.8 s of a 0.2 s timeout."""
    return plan_sweep(
        "stuck",
        ["stuck_seeds=[2]"],
        parse_seeds(f"0:{seeds}"),
        scenario_target="farm_scenarios:STUCK",
        seed_timeout_s=1.0,
    )


def sweep_rows(plan: Any, path: Path, executor: Any) -> list[dict[str, Any]]:
    with FindingsDatabase(path) as database:
        run_sweep(plan, database, executor)
        return [comparable(row) for row in database.rows()]


@pytest.mark.timeout(120)
def test_dask_local_pool_and_merged_shards_give_identical_rows(tmp_path: Path) -> None:
    seeds = parse_seeds("0:10")
    plan = plan_sweep("pingpong", PINGPONG_SETTINGS, seeds)
    local_rows = sweep_rows(plan, tmp_path / "local.db", LocalPool(2))
    executor = dask_executor()
    with FindingsDatabase(tmp_path / "dask.db") as database:
        summary = run_sweep(
            plan, database, executor, record=RecordOptions(tmp_path / "recs", per_signature=2)
        )
        dask_rows = [comparable(row) for row in database.rows()]
    assert executor.cluster is None, "the sweep closes the cluster it started"
    assert [entry["verified"] for entry in summary.recordings] == [True, True]  # recorded by a local pool
    assert sorted(path.name for path in (tmp_path / "recs").iterdir()) == sorted(
        f"pingpong-{entry['seed']}.ttr" for entry in summary.recordings
    )
    for index in range(2):
        shard_plan = plan_sweep("pingpong", PINGPONG_SETTINGS, seeds, Shard(index, 2))
        sweep_rows(shard_plan, tmp_path / f"shard{index}.db", LocalPool(1))
    with FindingsDatabase(tmp_path / "merged.db") as merged:
        for index in range(2):
            assert merged.merge_from(tmp_path / f"shard{index}.db").conflicts_total == 0
        merged_rows = [comparable(row) for row in merged.rows()]
    assert len(local_rows) == 10 and {row["outcome"] for row in local_rows} == {"pass", "fail"}
    assert dask_rows == local_rows
    assert merged_rows == local_rows


def assert_only_the_stuck_seed_timed_out(plan: Any, executor: Any, database_path: Path, seeds: int) -> None:
    """Sweep ``plan`` (stuck_seed_plan: seed 2 hangs): seed 2 is recorded as a timeout, killed once,
    and every other seed passes."""
    with FindingsDatabase(database_path) as database:
        summary = run_sweep(plan, database, executor)
        outcomes = {row["seed"]: row["outcome"] for row in database.rows()}
    assert outcomes == {seed: "timeout" if seed == 2 else "pass" for seed in range(seeds)}
    assert summary.killed_for_timeout == 1


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_dask_records_a_stuck_seed_as_timeout_and_restarts_its_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executor_module, "HARD_TIMEOUT_GRACE_S", 0.2)
    plan = stuck_seed_plan(seeds=6)
    executor = dask_executor()
    assert_only_the_stuck_seed_timed_out(plan, executor, tmp_path / "f.db", seeds=6)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_slow_worker_restart_does_not_time_out_the_seed_queued_behind_the_stuck_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One worker thread: seed 3 waits behind stuck seed 2 and re-runs on the restarted worker. The
    restart is made to take 4 s, as a loaded machine's did in CI, longer than the 3 s a seed may be
    in flight: it is not seed 3's time, and seed 3 passes."""
    from timetravel.farm.dask_executor import DaskExecutor

    monkeypatch.setattr(executor_module, "HARD_TIMEOUT_GRACE_S", 0.2)
    plan = stuck_seed_plan(seeds=5)
    executor = DaskExecutor(workers=1)
    restart_workers = executor.client.restart_workers

    def slow_restart(*arguments: Any, **options: Any) -> Any:
        time.sleep(4.0)
        return restart_workers(*arguments, **options)

    monkeypatch.setattr(executor.client, "restart_workers", slow_restart)
    assert_only_the_stuck_seed_timed_out(plan, executor, tmp_path / "f.db", seeds=5)


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_dask_records_a_seed_that_kills_every_worker_as_crash(tmp_path: Path) -> None:
    settings = [f"marker_dir={tmp_path}", "kill_seeds=[1]", "kill_always=on"]
    plan = plan_sweep("killer", settings, parse_seeds("0:3"), scenario_target="farm_scenarios:KILLER")
    with FindingsDatabase(tmp_path / "f.db") as database:
        run_sweep(plan, database, dask_executor())
        rows = {row["seed"]: row for row in database.rows()}
    assert [rows[seed]["outcome"] for seed in range(3)] == ["pass", "crash", "pass"]
    assert rows[1]["signature"] == "crash:farm.worker_died"


def _cancel_seed_on_submit(executor: Any, seed: int, times: int) -> list[int]:
    """Make the scheduler drop seed ``seed``'s task ``times`` times, as a loaded cluster did: each
    such submission is cancelled on the cluster right after it is made (not by the executor)."""
    submit = executor.client.submit
    cancelled: list[int] = []

    def submit_then_cancel(function: Any, job: Any, **options: Any) -> Any:
        future = submit(function, job, **options)
        if job.seed == seed and len(cancelled) < times:
            cancelled.append(job.seed)
            executor.client.cancel([future])
        return future

    executor.client.submit = submit_then_cancel
    return cancelled


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize(("times", "outcome"), [(1, "pass"), (3, "crash")])
def test_a_task_the_scheduler_drops_runs_again_then_counts_as_a_crash(
    tmp_path: Path, times: int, outcome: str
) -> None:
    plan = plan_sweep(
        "killer", [f"marker_dir={tmp_path}"], parse_seeds("0:3"), scenario_target="farm_scenarios:KILLER"
    )
    with dask_executor() as executor, FindingsDatabase(tmp_path / "f.db") as database:
        cancelled = _cancel_seed_on_submit(executor, 1, times)
        run_sweep(plan, database, executor)
        rows = {row["seed"]: row for row in database.rows()}
    assert cancelled == [1] * times
    assert [rows[seed]["outcome"] for seed in range(3)] == ["pass", outcome, "pass"]


SLOW_SEEDS = {"ci": "0:16", "full": "0:400"}


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_bigger_gossip_sweep_gives_identical_rows_on_every_executor(tmp_path: Path) -> None:
    """Sized by TIMETRAVEL_SLOW (ci: 16 seeds, full: 400); gossip draws thousands of choices a seed."""
    seeds = parse_seeds(SLOW_SEEDS[os.environ.get("TIMETRAVEL_SLOW", "ci")])
    plan = plan_sweep("gossip", ["coverage_min=0.99"], seeds)
    local_rows = sweep_rows(plan, tmp_path / "local.db", LocalPool(2))
    dask_rows = sweep_rows(plan, tmp_path / "dask.db", dask_executor())
    assert dask_rows == local_rows and len(local_rows) == len(seeds)
    assert all(row["state_hash"] for row in local_rows)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_bench_farm_quick_reports_its_figures(quick_bench: Callable[[str], dict[str, Any]]) -> None:
    figures = quick_bench("farm")
    assert figures["seeds"] == 6
    for key in ("seeds_per_s_1_worker", "seeds_per_s_2_workers", "scaling_2_vs_1", "dask_overhead_ratio"):
        assert figures[key] > 0


class _Future:
    """A stand-in for a Dask future in one of the states the executor meets."""

    def __init__(self, status: str, error: BaseException | None = None) -> None:
        self.status = status
        self.error = error

    def exception(self) -> BaseException | None:
        if self.status == "cancelled":
            raise RuntimeError("a cancelled future has no exception")
        return self.error


def test_a_task_lost_with_its_worker_is_run_again_not_raised() -> None:
    """A finished seed whose worker died before its result was fetched comes back ``lost`` with no
    exception; the sweep ended in "Dask task for seed 0 failed: NoneType: None" (a loaded machine,
    another seed killing every worker). It is a dropped task, run again like a cancelled one."""
    from timetravel.farm.dask_executor import dropped

    assert dropped(_Future("lost")) and dropped(_Future("cancelled"))
    assert dropped(_Future("error", None))
    assert not dropped(_Future("finished"))
    assert not dropped(_Future("error", ValueError("the seed's own error")))
