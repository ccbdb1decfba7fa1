"""rdma_fork at the default size, the user's path end to end: sweep, look, minimize, verify the fixes.

A fuzz sweep of 1,024-host worlds (swarm faults on, as ``timetravel fuzz`` does by default) finds
the fork failure on a small fraction of seeds, each on its own host, all in one bucket; the
earliest failing seed's recording shows the host, the page map around the missing page and the
launch; minimize shrinks it to one host, one registration and one launch; and each fix passes on
every seed of the bucket while the override, mp_fork and register_check=strict do not.
``TIMETRAVEL_SLOW=ci`` (the default) sweeps 60 seeds, ``full`` 200 (the figure of the docs).
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import slow_size

from timetravel.farm import FindingsDatabase, LocalPool, bucket_jobs, parse_seeds, plan_sweep, run_sweep
from timetravel.farm.job import config_hash
from timetravel.farm.verify import verify_bucket
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario

SIGNATURE = "crash:rdma.fork_child.missing_page"
SEEDS = {"ci": 60, "full": 200}
FIXES = (
    ("launch=posix_spawn",),
    ("launch=vfork",),
    ("register_align=page",),
    ("kernel=5.15", "force_fork_safe=off"),
)
STILL_FAILING = (("kernel=5.15",), ("launch=mp_fork",))


def _with(job: object, extra: tuple[str, ...]) -> object:
    settings = (*job.settings, *extra)  # type: ignore[attr-defined]
    config = get_scenario("rdma_fork").resolve_config(settings)
    return dataclasses.replace(job, settings=settings, config_hash=config_hash(config))  # type: ignore[call-overload]


@pytest.mark.slow
def test_the_users_path_at_the_default_size(
    tmp_path: Path, run_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    seeds = SEEDS.get(slow_size(), SEEDS["ci"])
    plan = plan_sweep("rdma_fork", [], parse_seeds(f"0:{seeds}"))
    assert plan.sweep.swarm
    with FindingsDatabase(tmp_path / "findings.db") as database:
        run_sweep(plan, database, LocalPool(2))
        rows = database.connection.execute(
            "SELECT seed, signature, failure_node FROM seeds WHERE signature IS NOT NULL ORDER BY seed"
        ).fetchall()
        jobs = bucket_jobs(database, "rdma_fork", SIGNATURE, None, seeds)
    assert rows and len(rows) <= seeds // 5, rows  # a small fraction of the seeds
    assert {signature for _seed, signature, _node in rows} == {SIGNATURE}
    nodes = [node for _seed, _signature, node in rows]
    assert len(set(nodes)) == len(nodes)  # a different host each time
    assert len(jobs) == len(rows)

    for fix in FIXES:
        verdict = verify_bucket([_with(job, fix) for job in jobs], "rdma_fork", SIGNATURE, LocalPool(2))  # type: ignore[misc]
        assert verdict.fixed == len(jobs), (fix, verdict)
    for change in STILL_FAILING:
        verdict = verify_bucket([_with(job, change) for job in jobs], "rdma_fork", SIGNATURE, LocalPool(2))  # type: ignore[misc]
        assert verdict.still_failing == len(jobs), (change, verdict)
    strict = verify_bucket(
        [_with(job, ("register_check=strict",)) for job in jobs],
        "rdma_fork",
        SIGNATURE,
        LocalPool(2),  # type: ignore[misc]
    )
    assert strict.new_signatures == {"assertion:rdma.register_check": len(jobs)}

    seed, _signature, node = rows[0]
    scenario = get_scenario("rdma_fork")
    recording = tmp_path / "failing.ttr"
    config = scenario.resolve_config(plan.sweep.settings)
    report, _world = record_run(scenario, config, seed, recording)
    assert report["failure"]["node"] == node and report["summary"]["failed_node"] == node
    shown = run_cli(
        "inspect", str(recording), "--path", f"nodes/{node}/fork_failure", "--json", "--depth", "6"
    )
    assert shown.returncode == 0, shown.stderr
    detail = json.loads(shown.stdout)["value"]
    assert detail["launch"] == 0 and detail["method"] == "fork_exec"
    missing = [row for row in detail["page_map"] if not row["in_child"]]
    assert detail["page"] in [row["page"] for row in missing]

    t_ns = report["failure"]["t_ns"]
    shell = run_cli(
        "shell",
        str(recording),
        "-c",
        f"goto {t_ns}ns; print nodes/{node}/last_launch; print nodes/{node}/fork_failure --depth 4",
    )
    assert shell.returncode == 0, shell.stderr
    for text in (f"FAIL crash on {node}", "fork_exec", "page_map", "in_child  bool  False", detail["page"]):
        assert text in shell.stdout, (text, shell.stdout)

    minimized = run_cli("minimize", str(recording), "--out", str(tmp_path / "min.ttr"), timeout=600)
    assert minimized.returncode == 0, minimized.stderr
    for line in (
        "nodes 1024 -> 1",
        "communicators 2 -> 1",
        "registered_buffers 2 -> 0",
        "launches_per_node 8 -> 1",
    ):
        assert line in minimized.stdout, minimized.stdout
