"""The repository tracks only the project's own files.

CI builds a clean clone, so anything machine-local that slips into git breaks it there and nowhere else: a
`.venv` symlink into a helper's worktree made `make install` fail in CI with "File exists" while every local
run, where the link still resolved, passed. This test is the clean clone's view, taken locally.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parent.parent
MACHINE_LOCAL_NAMES = (".venv", "__pycache__", ".mypy_cache", ".ruff_cache", ".pytest_cache")


def _tracked_paths() -> list[str]:
    try:
        listing = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPOSITORY, capture_output=True, check=True, timeout=60
        )
    except (OSError, subprocess.CalledProcessError):
        pytest.fail("the tests run from a git checkout (CI clones the repository)")
    return [path for path in listing.stdout.decode().split("\0") if path]


def test_no_machine_local_directory_is_tracked() -> None:
    tracked = [path for path in _tracked_paths() if set(Path(path).parts) & set(MACHINE_LOCAL_NAMES)]
    assert tracked == []


def test_no_tracked_symlink_points_outside_the_repository() -> None:
    escaping = []
    for path in _tracked_paths():
        candidate = REPOSITORY / path
        if candidate.is_symlink():
            target = (candidate.parent / candidate.readlink()).resolve()
            if not target.is_relative_to(REPOSITORY):
                escaping.append(f"{path} -> {candidate.readlink()}")
    assert escaping == []
