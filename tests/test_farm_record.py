"""Failing seeds re-run with recording after the sweep: which ones, where, and the check on each."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from timetravel.farm import FindingsDatabase, LocalPool, parse_seeds, plan_sweep, run_sweep
from timetravel.farm.job import timeout_row
from timetravel.farm.record import RecordOptions, check_recording
from timetravel.recording import RecordingReader

PINGPONG_SETTINGS = ["rtt_max=2390ns", "rounds=200"]


def sweep(
    path: Path, options: RecordOptions, settings: list[str] = PINGPONG_SETTINGS, seeds: str = "0:40"
) -> Any:
    plan = plan_sweep("pingpong", settings, parse_seeds(seeds))
    with FindingsDatabase(path) as database:
        return run_sweep(plan, database, LocalPool(2), record=options)


def rows(path: Path) -> list[dict[str, Any]]:
    with FindingsDatabase(path, create=False) as database:
        return list(database.rows())


def test_the_earliest_failures_are_recorded_and_each_recording_fails_the_same_way(tmp_path: Path) -> None:
    folder = tmp_path / "recs"
    summary = sweep(tmp_path / "f.db", RecordOptions(folder, per_signature=3))
    failing = sorted(
        (row for row in rows(tmp_path / "f.db") if row["outcome"] == "fail"),
        key=lambda row: (row["t_ns"], row["events"], row["seed"]),
    )
    expected = [row["seed"] for row in failing[:3]]
    assert [entry["seed"] for entry in summary.recordings] == expected
    assert all(entry["verified"] and entry["problem"] is None for entry in summary.recordings)
    assert sorted(path.name for path in folder.iterdir()) == sorted(
        f"pingpong-{seed}.ttr" for seed in expected
    )
    recorded = {row["seed"]: row["recording"] for row in rows(tmp_path / "f.db") if row["recording"]}
    assert recorded == {seed: str(folder / f"pingpong-{seed}.ttr") for seed in expected}
    by_seed = {row["seed"]: row for row in failing}
    for seed in expected:
        with RecordingReader.open(folder / f"pingpong-{seed}.ttr") as reader:
            end = reader.end()
        assert end is not None and end["failure"]["signature"] == "assertion:pingpong.rtt_max"
        assert end["state_hash"] == by_seed[seed]["state_hash"] and end["events"] == by_seed[seed]["events"]


def test_a_rerun_records_only_what_is_missing(tmp_path: Path) -> None:
    folder = tmp_path / "recs"
    first = sweep(tmp_path / "f.db", RecordOptions(folder, per_signature=2))
    again = sweep(tmp_path / "f.db", RecordOptions(folder, per_signature=2))
    more = sweep(tmp_path / "f.db", RecordOptions(folder, per_signature=4))
    assert (len(first.recordings), len(again.recordings), len(more.recordings)) == (2, 0, 2)
    assert len(list(folder.iterdir())) == 4
    none = sweep(tmp_path / "g.db", RecordOptions(tmp_path / "none", per_signature=0))
    assert none.recordings == [] and not (tmp_path / "none").exists()


def test_another_config_does_not_overwrite_a_recording_of_the_same_seed(tmp_path: Path) -> None:
    folder = tmp_path / "recs"
    first = sweep(tmp_path / "f.db", RecordOptions(folder, per_signature=1))
    other = sweep(
        tmp_path / "f.db", RecordOptions(folder, per_signature=1), [*PINGPONG_SETTINGS, "rounds=300"]
    )
    [mine], [theirs] = first.recordings, other.recordings
    assert (
        mine["seed"] == theirs["seed"]
    )  # the first round trip decides the earliest failure, whatever the rounds
    assert Path(mine["path"]).name == f"pingpong-{mine['seed']}.ttr"
    assert Path(theirs["path"]).name == f"pingpong-{mine['seed']}-{other.config_hash[:12]}.ttr"
    assert Path(mine["path"]).exists() and Path(theirs["path"]).exists()


def test_a_recording_that_does_not_match_its_row_is_reported() -> None:
    row = {"signature": "assertion:x", "state_hash": "aa"}
    same = {"seed": 1, "signature": "assertion:x", "state_hash": "aa"}
    assert check_recording(row, same) is None
    assert "fails with assertion:y" in str(check_recording(row, {**same, "signature": "assertion:y"}))
    assert "determinism bug" in str(check_recording(row, {**same, "state_hash": "bb"}))
    assert "recording failed: OSError" in str(check_recording(row, {**same, "error": "OSError: disk full"}))
    plan = plan_sweep("pingpong", [], parse_seeds("1"), seed_timeout_s=1.0)
    assert "ended as timeout" in str(check_recording(row, timeout_row(plan.job(1), 3.0, None, None)))


def test_a_recording_whose_worker_dies_is_reported_and_leaves_no_partial_file(tmp_path: Path) -> None:
    plan = plan_sweep(
        "record_killer",
        [f"marker_dir={tmp_path}"],
        parse_seeds("0:1"),
        scenario_target="farm_scenarios:RECORD_KILLER",
    )
    folder = tmp_path / "recs"
    with FindingsDatabase(tmp_path / "f.db") as database:
        summary = run_sweep(plan, database, LocalPool(1), record=RecordOptions(folder, per_signature=1))
    [entry] = summary.recordings
    assert not entry["verified"] and entry["path"] is None
    assert "ended as crash" in entry["problem"] and "SIGKILL" in entry["problem"]
    assert list(folder.iterdir()) == []  # the killed recorder's .partial file is gone
    [row] = rows(tmp_path / "f.db")
    assert row["outcome"] == "fail" and row["recording"] is None


def test_a_file_in_the_way_is_not_replaced_without_force(tmp_path: Path) -> None:
    """A new database over a folder that already holds a seed's recording (issue 32 item 5): the
    sweep leaves the file alone and says why, unless ``fuzz --force``."""
    folder = tmp_path / "recs"
    first = sweep(tmp_path / "f.db", RecordOptions(folder, per_signature=1))
    [recorded] = first.recordings
    path = Path(recorded["path"])
    path.write_bytes(b"someone's notes")
    [refused] = sweep(tmp_path / "g.db", RecordOptions(folder, per_signature=1)).recordings
    assert not refused["verified"] and refused["path"] is None
    assert f"{path} exists: record to another path, or pass --force" in refused["problem"]
    assert path.read_bytes() == b"someone's notes"
    [replaced] = sweep(tmp_path / "h.db", RecordOptions(folder, per_signature=1, force=True)).recordings
    assert replaced["verified"] and replaced["path"] == str(path)
    with RecordingReader.open(path) as reader:
        assert reader.end() is not None
    assert sorted(p.name for p in folder.iterdir()) == [path.name]
