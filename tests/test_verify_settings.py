"""``verify --set KEY=VALUE``: a fix that is a setting, proved on every seed of a findings bucket."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TIMETRAVEL = [sys.executable, "-m", "timetravel"]
BUCKET = "crash:rdma.fork_child.missing_page"


def _run(*arguments: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*TIMETRAVEL, *arguments], capture_output=True, text=True, timeout=600, cwd=cwd)


def test_verify_applies_a_setting_to_every_seed_of_the_bucket(tmp_path: Path) -> None:
    database = str(tmp_path / "f.db")
    sweep = _run(
        "fuzz",
        "rdma_fork",
        "--seeds",
        "0:40",
        "--set",
        "nodes=256",
        "--set",
        "last_node=255",
        "--db",
        database,
        "--workers",
        "1",
        "--json",
        cwd=tmp_path,
    )
    assert sweep.returncode == 1, sweep.stderr
    assert BUCKET in json.loads(sweep.stdout)["signatures"]
    verify = ["verify", "--bucket", BUCKET, "--db", database, "--workers", "1", "--json"]
    unchanged = json.loads(_run(*verify, cwd=tmp_path).stdout)
    assert unchanged["fixed"] == 0 and unchanged["still_failing"] == unchanged["seeds"] >= 1
    fixed = _run(*verify, "--set", "launch=posix_spawn", cwd=tmp_path)
    assert fixed.returncode == 0, fixed.stderr
    assert json.loads(fixed.stdout)["fixed"] == unchanged["seeds"]
    wrong = _run(*verify, "--set", "nope=1", cwd=tmp_path)
    assert wrong.returncode == 2 and "unknown config key 'nope'" in wrong.stderr
