"""`timetravel fuzz` as a separate program, interrupted the ways users and machines interrupt it.

Ctrl-C is SIGINT to the whole process group (what a terminal sends); a worker is SIGKILLed from
outside while the sweep runs. In both cases the database must end up with every seed exactly
once, each row equal to the row of the seed run in this process.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from timetravel.farm import FindingsDatabase, comparable, parse_seeds, plan_sweep, run_seed

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = ["rounds=20000"]
"""About 40,000 events a seed: long enough to interrupt a sweep of 16 seeds in the middle."""
SEEDS = "0:16"
WAIT_S_MAX = 60


def start_fuzz(db: Path) -> subprocess.Popen[str]:
    """The sweep runs in the database's folder (where its default recordings/ folder goes)."""
    command = [sys.executable, "-m", "timetravel", "fuzz", "pingpong", "--seeds", SEEDS, "--db", str(db)]
    for setting in SETTINGS:
        command += ["--set", setting]
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{ROOT / 'tests'}"}
    return subprocess.Popen(
        [*command, "--workers", "2", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=db.parent,
        start_new_session=True,
    )


def committed(db: Path) -> int:
    if not db.exists():
        return 0
    try:
        with sqlite3.connect(db, timeout=5) as connection:
            return int(connection.execute("SELECT count(*) FROM seeds").fetchone()[0])
    except sqlite3.OperationalError:  # the schema is not there yet
        return 0


def wait_for_rows(db: Path, process: subprocess.Popen[str], rows: int) -> int:
    deadline = time.monotonic() + WAIT_S_MAX
    while time.monotonic() < deadline:
        found = committed(db)
        if found >= rows:
            return found
        assert process.poll() is None, process.communicate()
        time.sleep(0.01)
    raise AssertionError(f"no {rows} rows within {WAIT_S_MAX} s")


@pytest.fixture(scope="module")
def reference_rows() -> list[dict[str, Any]]:
    """Every seed's row, run in this process (once for the module: it takes a second or two)."""
    plan = plan_sweep("pingpong", SETTINGS, parse_seeds(SEEDS))
    return [comparable(run_seed(plan.job(seed))) for seed in plan.seeds]


def database_rows(db: Path) -> list[dict[str, Any]]:
    with FindingsDatabase(db, create=False) as database:
        return [comparable(row) for row in database.rows()]


def finish(process: subprocess.Popen[str]) -> tuple[int, dict[str, Any], str]:
    out, err = process.communicate(timeout=WAIT_S_MAX)
    return process.returncode, json.loads(out), err


@pytest.mark.parametrize("how", ["ctrl_c", "sigterm"])
def test_an_interrupted_sweep_resumes_with_the_same_command(
    tmp_path: Path, how: str, reference_rows: list[dict[str, Any]]
) -> None:
    """Ctrl-C is SIGINT to the process group; a batch scheduler's time limit is SIGTERM to the parent."""
    db = tmp_path / "f.db"
    process = start_fuzz(db)
    wait_for_rows(db, process, 2)
    if how == "ctrl_c":
        os.killpg(process.pid, signal.SIGINT)
    else:
        process.send_signal(signal.SIGTERM)
    code, interrupted, err = finish(process)
    assert code == 130 and interrupted["stopped"] == "interrupted"
    assert "Run the same command again to resume" in err
    done = committed(db)
    assert 2 <= done < 16 and interrupted["remaining"] == 16 - done
    code, resumed, _ = finish(start_fuzz(db))
    assert code == 0 and resumed["stopped"] == "done"
    assert (resumed["already_done"], resumed["ran"], resumed["remaining"]) == (done, 16 - done, 0)
    assert database_rows(db) == reference_rows


def test_a_worker_sigkilled_from_outside_loses_and_double_counts_no_seed(
    tmp_path: Path, reference_rows: list[dict[str, Any]]
) -> None:
    db = tmp_path / "f.db"
    process = start_fuzz(db)
    wait_for_rows(db, process, 2)
    workers = _worker_processes(process.pid)
    assert len(workers) == 2
    workers[0].send_signal(signal.SIGKILL)
    code, summary, _ = finish(process)
    assert code == 0 and summary["ran"] == 16 and summary["duplicates"] == 0
    assert summary["worker_deaths"] == 1
    assert database_rows(db) == reference_rows


def _worker_processes(parent_pid: int) -> list[psutil.Process]:
    """The pool's workers: the fork server's children (the resource tracker is no worker)."""
    servers = [
        child
        for child in psutil.Process(parent_pid).children()
        if any("forkserver" in word for word in child.cmdline())
    ]
    assert len(servers) == 1, [child.cmdline() for child in psutil.Process(parent_pid).children()]
    return servers[0].children()
