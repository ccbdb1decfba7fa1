"""Shared fixtures: run the CLI in-process or as a real subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent


def slow_size() -> str:
    """`ci` (a bounded selection, the default) or `full` for the slow tests' sizes."""
    return os.environ.get("TIMETRAVEL_SLOW", "ci")


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m timetravel ARGS`` in a subprocess, as a user would."""

    def run(
        *args: str, env: dict[str, str] | None = None, timeout: float = 120, cwd: Path = REPOSITORY_ROOT
    ) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, **(env or {})}
        full_env["PYTHONPATH"] = str(REPOSITORY_ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
        return subprocess.run(
            [sys.executable, "-m", "timetravel", *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
            cwd=cwd,
        )

    return run


@pytest.fixture
def quick_bench(capsys: pytest.CaptureFixture[str]) -> Callable[[str], dict[str, Any]]:
    """Run ``timetravel bench NAME --quick --json`` in this process: its figures, once it exited 0
    and reported itself as bench NAME."""
    from timetravel.cli import main

    def run(name: str) -> dict[str, Any]:
        assert main(["bench", name, "--quick", "--json"]) == 0
        result = json.loads(capsys.readouterr().out)
        assert result["bench"] == name
        return dict(result["figures"])

    return run


# -- small recordings, made once per test session (snapshot, recording and session tests) ----------

GOSSIP_RECORDING_SETTINGS = {"nodes": 48, "rumors": 12, "coverage_min": 0.99}
GOSSIP_RECORDING_SEED = 3
GOSSIP_RECORDING_SNAPSHOT_EVERY = 512


@pytest.fixture(scope="session")
def gossip_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A failing gossip run (coverage_min) recorded with a snapshot every 512 events."""
    from timetravel.recording import record_run
    from timetravel.scenarios import get_scenario

    scenario = get_scenario("gossip")
    config = scenario.resolve_config(GOSSIP_RECORDING_SETTINGS)
    path = tmp_path_factory.mktemp("recordings") / "gossip.ttr"
    report, _world = record_run(
        scenario, config, GOSSIP_RECORDING_SEED, path, snapshot_every_events=GOSSIP_RECORDING_SNAPSHOT_EVERY
    )
    return path, report


@pytest.fixture
def gossip_copy(gossip_recording: tuple[Path, dict[str, Any]], tmp_path: Path) -> Path:
    """A copy of gossip_recording's file (``branched.ttr`` in the test's folder), for a test that appends
    to it."""
    path = tmp_path / "branched.ttr"
    shutil.copy(gossip_recording[0], path)
    return path


@pytest.fixture(scope="session")
def floats_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """The float-pages scenario of scenario_fixtures.py, a snapshot every 128 events."""
    from scenario_fixtures import FLOATS

    from timetravel.recording import record_run

    path = tmp_path_factory.mktemp("recordings") / "floats.ttr"
    report, _world = record_run(FLOATS, FLOATS.resolve_config({}), 5, path, snapshot_every_events=128)
    return path, report


@pytest.fixture(scope="module")
def needle_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """needle recorded with its branch ``fixed`` (shell_recordings.py), one per test module."""
    from shell_recordings import make_needle_recording

    path = tmp_path_factory.mktemp("needle") / "needle.ttr"
    make_needle_recording(path)
    return path
