"""Recordings are never silently lost or misread: recording over branches is refused without
--force, and a recording still being written says "in progress" everywhere (recording/lock.py),
while one whose writer died stays "incomplete"."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from timetravel.cli import main
from timetravel.explore import Session
from timetravel.recording import Recorder, RecordingReader
from timetravel.scenarios import get_scenario
from timetravel.sim.runner import build_world

GOSSIP = ["gossip", "--seed", "4", "--set", "nodes=24", "--set", "rumors=6"]


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _start_recording(path: Path, events: int = 300) -> Recorder:
    """A recorder that has written ``events`` events and is still open: a recording in progress."""
    scenario = get_scenario("gossip")
    config = scenario.resolve_config(["nodes=24", "rumors=6"])
    recorder = Recorder(scenario, build_world(scenario, config, 4), path, snapshot_every_events=256)
    recorder.run(max_events=events)
    recorder.flush()  # the writer thread is idle from here: the test may use the writer itself
    return recorder


@pytest.fixture
def live(tmp_path: Path) -> Iterator[tuple[Path, Recorder]]:
    path = tmp_path / "live.ttr"
    recorder = _start_recording(path)
    yield path, recorder
    recorder.abort()


def test_run_record_refuses_to_replace_a_recording_with_branches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "g.ttr")
    assert _cli(capsys, "run", *GOSSIP, "--record", path)[0] == 0
    assert _cli(capsys, "branch", path, "--at", "1ms", "--branch-seed", "7", "--name", "b1")[0] in (0, 1)
    size = Path(path).stat().st_size
    code, _out, err = _cli(capsys, "run", *GOSSIP, "--record", path)
    assert code == 2
    assert err.strip().splitlines() == [
        f"timetravel: error: {path} exists (a recording with 1 branch that replacing it would delete: b1): "
        "record to another path, or pass --force to replace it"
    ]
    assert Path(path).stat().st_size == size
    with RecordingReader.open(path) as reader:
        assert list(reader.catalog.branches) == ["b1"]
    assert _cli(capsys, "run", *GOSSIP, "--record", path, "--force")[0] == 0
    with RecordingReader.open(path) as reader:
        assert list(reader.catalog.branches) == []


def test_run_record_replaces_a_recording_without_branches_only_with_force(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = str(tmp_path / "g.ttr")
    assert _cli(capsys, "run", *GOSSIP, "--record", path)[0] == 0
    code, _out, err = _cli(capsys, "run", *GOSSIP, "--record", path)
    assert code == 2 and err == (
        f"timetravel: error: {path} exists (a recording): record to another path, or pass --force to replace it\n"
    )
    assert _cli(capsys, "run", *GOSSIP, "--record", path, "--force")[0] == 0


def test_force_is_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "--force" in capsys.readouterr().out


def test_recording_over_a_recording_in_progress_is_refused(
    live: tuple[Path, Recorder], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _recorder = live
    code, _out, err = _cli(capsys, "run", *GOSSIP, "--record", str(path), "--force")
    assert code == 2
    assert (
        err.strip()
        == f"timetravel: error: {path}: another process is writing this recording (it is in progress)"
    )


def test_a_recording_being_written_is_in_progress_everywhere(
    live: tuple[Path, Recorder], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _recorder = live
    with RecordingReader.open(path) as reader:
        assert reader.in_progress and reader.branch_in_progress("main")
        assert reader.end() is None
    code, out, err = _cli(capsys, "branches", str(path))
    assert code == 0
    assert "main: in progress" in out
    assert (
        "the recording is in progress: another process is still writing it (events up to #256 so far" in err
    )
    code, out, err = _cli(capsys, "replay", str(path))
    assert code == 2 and out == ""
    assert err.strip().splitlines() == [
        f"timetravel: error: {path}: the recording is in progress (another process is still writing it); "
        "replay it once the run has finished"
    ]
    code, out, err = _cli(capsys, "inspect", str(path), "--json")
    assert code == 0 and "the recording is in progress" in err
    code, out, err = _cli(capsys, "shell", str(path), "-c", "goto 100ms; where")
    assert code == 0
    assert "recording in progress: written up to" in out and "run ends at" not in out
    assert "none yet (the recording is still being written)" in out
    with Session.open(path) as session:
        assert session.info.in_progress and not session.info.complete
        assert session.info.outcome is None


def test_a_recording_whose_writer_died_is_incomplete_not_in_progress(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "crashed.ttr"
    recorder = _start_recording(path)
    recorder.writer.file.close()  # the process dies: no END, no index, and the kernel drops the lock
    with RecordingReader.open(path) as reader:
        assert not reader.in_progress and reader.end() is None
        assert any("the run's end was not recorded" in line for line in reader.describe_loss())
    code, out, err = _cli(capsys, "branches", str(path))
    assert code == 0 and "main: unknown" in out and "in progress" not in out + err
    code, _out, err = _cli(capsys, "replay", str(path), "--json")
    assert "in progress" not in err


def test_a_finished_recording_is_not_in_progress(
    live: tuple[Path, Recorder], capsys: pytest.CaptureFixture[str]
) -> None:
    path, recorder = live
    recorder.finish(recorder.run())
    code, out, err = _cli(capsys, "branches", str(path))
    assert code == 0 and "in progress" not in out + err
    code, out, _err = _cli(capsys, "replay", str(path), "--json")
    assert code == 0 and json.loads(out)["verified"] is True


def test_a_sweep_never_replaces_a_branched_recording(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from timetravel.farm.job import SeedJob
    from timetravel.farm.record import record_seed

    path = tmp_path / "gossip-4.ttr"
    assert _cli(capsys, "run", *GOSSIP, "--record", str(path))[0] == 0
    assert _cli(capsys, "branch", str(path), "--at", "1ms", "--branch-seed", "7", "--name", "b1")[0] in (0, 1)
    job = SeedJob("gossip", ("nodes=24", "rumors=6"), "", 4, "", record_path=str(path))
    result = record_seed(job)
    assert "exists (a recording with 1 branch that replacing it would delete: b1)" in result["error"]
    with RecordingReader.open(path) as reader:
        assert list(reader.catalog.branches) == ["b1"]
    assert not (tmp_path / "gossip-4.ttr.partial").exists()


def test_a_crashed_recorder_can_be_recorded_over(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "crashed.ttr"
    recorder = _start_recording(path)
    recorder.writer.file.close()
    code, _out, err = _cli(capsys, "run", *GOSSIP, "--record", str(path), "--force")
    assert code == 0, err


def test_the_cursor_text_says_the_recording_is_in_progress() -> None:
    from timetravel.explore.commands import render_text
    from timetravel.explore.results import CursorResult

    cursor = CursorResult("main", 40_000_000, 192, 192, 40_000_000, None, in_progress=True)
    assert render_text(cursor, "ms")[0] == (
        "main at 40ms, event #192 of 192 (in progress: written up to 40ms so far)"
    )
    assert cursor.to_data()["in_progress"] is True
    finished = CursorResult("main", 40_000_000, 192, 192, 40_000_000, None)
    assert render_text(finished, "ms")[0] == "main at 40ms, event #192 of 192 (ends at 40ms)"
