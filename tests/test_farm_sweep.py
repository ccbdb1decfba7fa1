"""Sweeps on the local process pool: the rows, resuming, sharding, killed and stuck workers.

The reference for every row is ``run_seed`` called in this process: an executor must give the
same rows (apart from wall time, attempts and the recording path) as running the seed here.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import timetravel.farm.executor as executor_module
from timetravel.farm import (
    FindingsDatabase,
    LocalPool,
    Shard,
    SweepPlan,
    comparable,
    parse_seeds,
    plan_sweep,
    run_seed,
    run_sweep,
)
from timetravel.farm.sweep import STOP_DONE, STOP_TIME_BUDGET, load_scenario

PINGPONG_SETTINGS = ["rtt_max=2390ns", "rounds=200"]
"""rtt_max just under the largest round trip (2 x (1000 + 200) ns): some seeds fail, most pass."""


def reference_rows(plan: SweepPlan) -> list[dict[str, Any]]:
    return [comparable(run_seed(plan.job(seed))) for seed in plan.seeds.in_shard(plan.shard)]


def database_rows(path: Path) -> list[dict[str, Any]]:
    with FindingsDatabase(path, create=False) as database:
        return [comparable(row) for row in database.rows()]


def sweep(plan: SweepPlan, path: Path, workers: int = 2, **options: Any) -> Any:
    with FindingsDatabase(path) as database:
        return run_sweep(plan, database, LocalPool(workers), **options)


def test_local_pool_gives_the_rows_of_an_in_process_run(tmp_path: Path) -> None:
    plan = plan_sweep("pingpong", PINGPONG_SETTINGS, parse_seeds("0:24"))
    summary = sweep(plan, tmp_path / "f.db")
    rows = database_rows(tmp_path / "f.db")
    assert rows == reference_rows(plan)
    outcomes = {row["outcome"] for row in rows}
    assert outcomes == {"pass", "fail"}, "the settings must give both outcomes for this test to mean much"
    assert summary.ran == 24 and summary.stopped == STOP_DONE and summary.remaining == 0
    failing = [row for row in rows if row["outcome"] == "fail"]
    assert summary.failing == len(failing)
    assert summary.signatures == {"assertion:pingpong.rtt_max": len(failing)}
    for row in failing:  # the failure time is the row's t, and every round trip took 2 latencies or more
        assert row["t_ns"] >= 2_000 and row["failure_node"] == "ping"


def test_a_rerun_skips_done_seeds_and_a_wider_range_runs_only_the_new_ones(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    first = sweep(plan_sweep("pingpong", PINGPONG_SETTINGS, parse_seeds("0:10")), path)
    again = sweep(plan_sweep("pingpong", PINGPONG_SETTINGS, parse_seeds("0:10")), path)
    wider_plan = plan_sweep("pingpong", PINGPONG_SETTINGS, parse_seeds("0:16"))
    wider = sweep(wider_plan, path)
    assert (first.ran, again.ran, again.already_done) == (10, 0, 10)
    assert (wider.ran, wider.already_done, wider.seeds_in_sweep) == (6, 10, 16)
    assert database_rows(path) == reference_rows(wider_plan)


def test_a_time_budget_stops_starting_seeds_and_a_rerun_finishes(tmp_path: Path) -> None:
    path = tmp_path / "f.db"
    plan = plan_sweep("pingpong", [*PINGPONG_SETTINGS, "rounds=20000"], parse_seeds("0:12"))
    stopped = sweep(plan, path, workers=1, time_budget_s=0.05)
    assert stopped.stopped == STOP_TIME_BUDGET
    assert 0 <= stopped.ran < 12 and stopped.remaining == 12 - stopped.ran
    finished = sweep(plan, path, workers=2)
    assert finished.ran == 12 - stopped.ran and finished.remaining == 0
    assert database_rows(path) == reference_rows(plan)


def test_shards_merged_give_the_rows_of_the_whole_sweep(tmp_path: Path) -> None:
    seeds = parse_seeds("0:20")
    whole = plan_sweep("pingpong", PINGPONG_SETTINGS, seeds)
    for index in range(2):
        sweep(
            plan_sweep("pingpong", PINGPONG_SETTINGS, seeds, Shard(index, 2)),
            tmp_path / f"shard{index}.db",
            1,
        )
    assert {row["seed"] % 2 for row in database_rows(tmp_path / "shard1.db")} == {1}
    with FindingsDatabase(tmp_path / "all.db") as merged:
        first = merged.merge_from(tmp_path / "shard0.db")
        second = merged.merge_from(tmp_path / "shard1.db")
        again = merged.merge_from(tmp_path / "shard1.db")
        assert list(merged.sweeps()) == [("pingpong", whole.sweep.config_hash)]
    assert (first.inserted, second.inserted, again.inserted, again.duplicates) == (10, 10, 0, 10)
    assert again.conflicts_total == 0
    assert database_rows(tmp_path / "all.db") == reference_rows(whole)


def test_merging_tells_a_determinism_conflict_from_other_code(tmp_path: Path) -> None:
    plan = plan_sweep("pingpong", PINGPONG_SETTINGS, parse_seeds("0:5"))
    sweep(plan, tmp_path / "a.db", 1)
    sweep(plan, tmp_path / "b.db", 1)
    with FindingsDatabase(tmp_path / "b.db") as other:
        execute = other.connection.execute
        execute("UPDATE seeds SET state_hash = 'tampered' WHERE seed = 2")  # same code, other result
        execute("UPDATE seeds SET code_fingerprint = 'newer' WHERE seed = 3")  # other code, same result
        execute("UPDATE seeds SET code_fingerprint = 'newer', events = events + 1 WHERE seed = 4")
    with FindingsDatabase(tmp_path / "a.db") as kept:
        result = kept.merge_from(tmp_path / "b.db")
    assert (result.inserted, result.duplicates) == (0, 5)
    assert result.conflicts_total == 1 and result.conflicts[0]["seed"] == 2
    assert list(result.conflicts[0]["differs"]) == ["state_hash"]
    assert result.conflicts[0]["differs"]["state_hash"][1] == "tampered"
    assert (result.other_code, result.other_code_changed) == (2, 1)
    assert database_rows(tmp_path / "a.db") == reference_rows(plan)


def test_a_worker_killed_mid_seed_loses_and_double_counts_nothing(tmp_path: Path) -> None:
    settings = [f"marker_dir={tmp_path}", "kill_seeds=[3, 7]"]
    plan = plan_sweep("killer", settings, parse_seeds("0:12"), scenario_target="farm_scenarios:KILLER")
    summary = sweep(plan, tmp_path / "f.db")
    assert sorted(path.name for path in tmp_path.glob("killed-*")) == ["killed-3", "killed-7"]
    assert (summary.worker_deaths, summary.retries, summary.ran, summary.duplicates) == (2, 2, 12, 0)
    with FindingsDatabase(tmp_path / "f.db", create=False) as database:
        attempts = {row["seed"]: row["attempts"] for row in database.rows()}
    assert attempts == {seed: 2 if seed in (3, 7) else 1 for seed in range(12)}
    assert database_rows(tmp_path / "f.db") == reference_rows(plan)  # markers exist: no kill in-process


def test_a_seed_that_kills_every_worker_is_recorded_as_crash(tmp_path: Path) -> None:
    settings = [f"marker_dir={tmp_path}", "kill_seeds=[1]", "kill_always=on"]
    plan = plan_sweep("killer", settings, parse_seeds("0:3"), scenario_target="farm_scenarios:KILLER")
    summary = sweep(plan, tmp_path / "f.db")
    with FindingsDatabase(tmp_path / "f.db", create=False) as database:
        rows = {row["seed"]: row for row in database.rows()}
    assert [rows[seed]["outcome"] for seed in range(3)] == ["pass", "crash", "pass"]
    assert rows[1]["signature"] == "crash:farm.worker_died" and rows[1]["attempts"] == 3
    assert "SIGKILL" in rows[1]["failure_message"]
    assert summary.worker_deaths == 3 and summary.failing == 1


def test_a_seed_past_its_timeout_is_stopped_and_recorded(tmp_path: Path) -> None:
    plan = plan_sweep("pingpong", ["rounds=100000000"], parse_seeds("0:2"), seed_timeout_s=0.3)
    started = time.monotonic()
    summary = sweep(plan, tmp_path / "f.db")
    assert time.monotonic() - started < 10
    with FindingsDatabase(tmp_path / "f.db", create=False) as database:
        rows = list(database.rows())
    assert [row["outcome"] for row in rows] == ["timeout", "timeout"]
    for row in rows:  # stopped by its own deadline check: it knows how far it got
        assert row["signature"] == "timeout:farm.seed_timeout" and row["events"] > 0 and row["t_ns"] > 0
        assert 0.3 <= row["wall_s"] < 3
    assert summary.killed_for_timeout == 0 and summary.failing == 2


def test_a_handler_that_never_returns_is_killed_by_the_watchdog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executor_module, "HARD_TIMEOUT_GRACE_S", 0.2)
    plan = plan_sweep(
        "stuck",
        ["stuck_seeds=[1]"],
        parse_seeds("0:4"),
        scenario_target="farm_scenarios:STUCK",
        seed_timeout_s=0.2,
    )
    summary = sweep(plan, tmp_path / "f.db")
    with FindingsDatabase(tmp_path / "f.db", create=False) as database:
        rows = {row["seed"]: row for row in database.rows()}
    assert [rows[seed]["outcome"] for seed in range(4)] == ["pass", "timeout", "pass", "pass"]
    assert rows[1]["events"] is None and "worker killed" in rows[1]["failure_message"]
    assert summary.killed_for_timeout == 1 and summary.ran == 4


def test_swarm_is_on_by_default_where_the_scenario_supports_it(tmp_path: Path) -> None:
    target = "farm_scenarios:SWARMY"
    swarming = plan_sweep("swarmy", [], parse_seeds("0:30"), scenario_target=target)
    assert swarming.sweep.settings == ("faults=swarm",) and swarming.sweep.swarm
    assert plan_sweep(
        "swarmy", ["faults=none"], parse_seeds("0:1"), scenario_target=target
    ).sweep.settings == ("faults=none",)
    assert not plan_sweep("swarmy", [], parse_seeds("0:1"), scenario_target=target, swarm=False).sweep.swarm
    assert not plan_sweep("pingpong", [], parse_seeds("0:1")).sweep.swarm
    needle = plan_sweep(
        "needle", [], parse_seeds("0:1")
    ).sweep  # a JSON `faults` key whose build rejects swarm
    assert needle.settings == () and not needle.swarm
    sweep(swarming, tmp_path / "f.db")
    rows = database_rows(tmp_path / "f.db")
    assert rows == reference_rows(swarming)
    failing = [row for row in rows if row["outcome"] == "fail"]
    assert failing and len(failing) < len(rows)
    for row in failing:
        assert {"crash", "drop"} <= set(row["fault_kinds"])
        assert row["signature"] == "oracle:swarmy.crash_lost_data"


def test_fault_kinds_are_those_started_by_the_failure(tmp_path: Path) -> None:
    """needle's fault records name their start `t_start`; kinds starting after the failure do not count."""
    plan = plan_sweep("needle", ["rounds=12"], parse_seeds("0:3"))
    sweep(plan, tmp_path / "f.db")
    with FindingsDatabase(tmp_path / "f.db", create=False) as database:
        rows = list(database.rows())
    for row in rows:
        world = load_scenario("needle", None).build(plan.sweep.config, row["seed"])
        started = sorted({fault["kind"] for fault in world.faults if fault["t_start"] <= row["t_ns"]})
        assert row["fault_kinds"] == started and started
    assert any(row["outcome"] == "fail" and {"drop", "restart"} <= set(row["fault_kinds"]) for row in rows)
