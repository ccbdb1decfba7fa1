"""Recording over an existing recording (issue 18 part 6): a large one is replaced by a new file
renamed over it, not truncated in place (files.replace_with_new_file: freeing 20 MB of pages cost
6-8 ms inside the run); the new recording is the same bytes either way."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from timetravel.recording import RecordingReader, record_run
from timetravel.recording import writer as writer_module
from timetravel.scenarios import get_scenario


def _record(path: Path, seed: int) -> None:
    scenario = get_scenario("gossip")
    record_run(scenario, scenario.resolve_config(["nodes=24", "rumors=6"]), seed, path)


@pytest.fixture
def replace_every_file(monkeypatch: pytest.MonkeyPatch) -> None:
    """Replace any existing file (the test recordings are far below REPLACE_BYTES_MIN)."""
    monkeypatch.setattr(writer_module, "REPLACE_BYTES_MIN", 1)


def _wait_for_the_release(folder: Path) -> None:
    for _attempt in range(100):  # the old file is closed by a short thread
        if not [name for name in os.listdir(folder) if name.endswith(".new")]:
            return
        time.sleep(0.01)


@pytest.mark.usefixtures("replace_every_file")
def test_a_recording_over_another_is_a_new_file_with_the_same_bytes(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.ttr"
    _record(fresh, 2)
    path = tmp_path / "run.ttr"
    _record(path, 1)
    old_inode = path.stat().st_ino
    with RecordingReader.open(path) as old_reader:
        old_end = old_reader.catalog.ends["main"]
        _record(path, 2)  # over the recording the reader has open
        assert path.stat().st_ino != old_inode
        assert path.read_bytes() == fresh.read_bytes()
        # the old file is still whole for whoever had it open
        assert old_reader.catalog.ends["main"] == old_end
        assert old_reader.verify_frames() == len(old_reader.catalog.frames)
    _wait_for_the_release(tmp_path)
    assert sorted(os.listdir(tmp_path)) == ["fresh.ttr", "run.ttr"]  # no temporary file left


@pytest.mark.usefixtures("replace_every_file")
def test_a_symlinked_recording_is_written_through_the_link(tmp_path: Path) -> None:
    real = tmp_path / "real.ttr"
    _record(real, 1)
    link = tmp_path / "link.ttr"
    link.symlink_to(real)
    _record(link, 2)
    assert link.is_symlink()
    fresh = tmp_path / "fresh.ttr"
    _record(fresh, 2)
    assert real.read_bytes() == fresh.read_bytes()


def test_a_small_file_is_truncated_in_place(tmp_path: Path) -> None:
    path = tmp_path / "run.ttr"
    _record(path, 1)
    assert path.stat().st_size < writer_module.REPLACE_BYTES_MIN
    inode = path.stat().st_ino
    _record(path, 2)
    assert path.stat().st_ino == inode
