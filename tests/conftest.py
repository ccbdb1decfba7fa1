"""Shared fixtures: run the CLI in-process or as a real subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPOSITORY_ROOT = Path(__file__).resolve().parent.parent


def slow_size() -> str:
    """`ci` (a bounded selection, the default) or `full` for the slow tests' sizes."""
    return os.environ.get("TIMETRAVEL_SLOW", "ci")


@pytest.fixture
def run_cli() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run ``python -m timetravel ARGS`` in a subprocess, as a user would."""

    def run(
        *args: str, env: dict[str, str] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        full_env = {**os.environ, **(env or {})}
        full_env["PYTHONPATH"] = str(REPOSITORY_ROOT) + os.pathsep + full_env.get("PYTHONPATH", "")
        return subprocess.run(
            [sys.executable, "-m", "timetravel", *args],
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
            cwd=REPOSITORY_ROOT,
        )

    return run
