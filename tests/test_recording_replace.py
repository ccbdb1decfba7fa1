"""Recording over a file that exists (issue 32 item 5): refused in one line unless ``--force``; with
``--force`` the new recording is written to ``PATH.partial`` and renamed over the old file only
once complete, so an interrupted run keeps the old recording and leaves a readable partial one."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from timetravel.cli import main
from timetravel.recording import RecordingReader, record_run
from timetravel.recording import files as files_module
from timetravel.recording.replace import RecordingExistsError
from timetravel.scenarios import get_scenario

PINGPONG_FAILS = ["pingpong", "--seed", "3", "--set", "rtt_max=2390ns", "--set", "rounds=200"]


def _record(path: Path, seed: int, *, force: bool = False) -> None:
    scenario = get_scenario("gossip")
    record_run(scenario, scenario.resolve_config(["nodes=24", "rumors=6"]), seed, path, force=force)


def _wait_for_the_release() -> None:
    for _attempt in range(100):  # the old file is closed by a short thread
        if not [thread for thread in __import__("threading").enumerate() if "release" in thread.name]:
            return
        time.sleep(0.01)


def test_recording_over_a_file_is_refused_and_the_file_is_kept(tmp_path: Path) -> None:
    path = tmp_path / "run.ttr"
    _record(path, 1)
    before = path.read_bytes()
    with pytest.raises(RecordingExistsError, match=r"run.ttr exists \(a recording\): .* pass --force"):
        _record(path, 2)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["run.ttr"]


def test_every_recording_command_refuses_an_existing_file_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    keep = tmp_path / "keep.ttr"
    assert main(["run", *PINGPONG_FAILS, "--record", str(keep)]) == 1
    assert main(["branch", str(keep), "--at", "10us", "--branch-seed", "3"]) == 0
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    before, capsys_out = keep.read_bytes(), capsys.readouterr()
    del capsys_out
    refusals = {
        (
            "run",
            "pingpong",
            "--record",
            str(keep),
        ): "keep.ttr exists (a recording with 1 branch that replacing "
        "it would delete: b1): record to another path, or pass --force to replace it",
        ("run", "pingpong", "--record", str(notes)): "notes.txt exists: record to another path",
        ("minimize", str(keep), "--out", str(keep.with_name("other.ttr")), "--pytest", str(notes)): (
            "notes.txt exists: write the test to another path, or pass --force"
        ),
        ("minimize", str(keep), "--out", str(notes)): "notes.txt exists: record to another path",
    }
    for argv, message in refusals.items():
        assert main(list(argv)) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("timetravel: error: ") and err.count("\n") == 1, err
        assert message in err, err
    assert keep.read_bytes() == before and notes.read_text() == "mine"
    assert not (tmp_path / "other.ttr").exists()


def test_torchrun_refuses_an_existing_recording_before_any_rank_starts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    keep = tmp_path / "keep.ttr"
    keep.write_bytes(b"anything")
    script = Path(__file__).parent / "torch_scripts" / "known_work.py"
    assert script.is_file()
    assert main(["torchrun", "--nproc-per-node", "2", "--record", str(keep), str(script)]) == 2
    err = capsys.readouterr().err
    assert err == f"timetravel: error: {keep} exists: record to another path, or pass --force to replace it\n"
    assert keep.read_bytes() == b"anything"


def test_force_writes_a_partial_file_and_renames_it_over_the_old_one(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh.ttr"
    _record(fresh, 2)
    path = tmp_path / "run.ttr"
    _record(path, 1)
    old_inode = path.stat().st_ino
    with RecordingReader.open(path) as old_reader:
        old_end = old_reader.catalog.ends["main"]
        _record(path, 2, force=True)  # over the recording the reader has open
        assert path.stat().st_ino != old_inode
        assert path.read_bytes() == fresh.read_bytes()
        # the old file is still whole for whoever had it open
        assert old_reader.catalog.ends["main"] == old_end
        assert old_reader.verify_frames() == len(old_reader.catalog.frames)
    assert sorted(os.listdir(tmp_path)) == ["fresh.ttr", "run.ttr"]  # no partial file left


def test_a_large_old_file_is_released_by_a_thread(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(files_module, "RELEASE_BYTES_MIN", 1)
    path = tmp_path / "run.ttr"
    _record(path, 1)
    _record(path, 2, force=True)
    _wait_for_the_release()
    with RecordingReader.open(path) as reader:
        assert reader.header["seed"] == 2
    assert sorted(os.listdir(tmp_path)) == ["run.ttr"]


def test_a_symlinked_recording_is_replaced_through_the_link(tmp_path: Path) -> None:
    real = tmp_path / "real.ttr"
    _record(real, 1)
    link = tmp_path / "link.ttr"
    link.symlink_to(real)
    _record(link, 2, force=True)
    assert link.is_symlink()
    fresh = tmp_path / "fresh.ttr"
    _record(fresh, 2)
    assert real.read_bytes() == fresh.read_bytes()


def test_a_killed_forced_recording_keeps_the_old_file_and_leaves_a_readable_partial(tmp_path: Path) -> None:
    path = tmp_path / "run.ttr"
    _record(path, 1)
    before = path.read_bytes()
    argv = ["gossip", "--set", "nodes=64", "--set", "rumors=20000", "--snapshot-every", "4096"]
    process = subprocess.Popen(
        [sys.executable, "-m", "timetravel", "run", *argv, "--record", str(path), "--force"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=Path(__file__).parent,
    )
    partial = tmp_path / "run.ttr.partial"
    try:
        for _attempt in range(6000):  # wait until a few frames past the header are on disk
            if partial.exists() and partial.stat().st_size > 4096:
                break
            assert process.poll() is None, process.stderr and process.stderr.read()
            time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=60)
        if process.stderr is not None:
            process.stderr.close()
    assert path.read_bytes() == before
    with RecordingReader.open(partial) as reader:
        assert reader.header["seed"] == 0 and reader.end() is None
        assert reader.event_batches()
