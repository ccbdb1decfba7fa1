"""The farm's commands as a user types them: fuzz, findings (merge, --baseline) and verify."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from timetravel.cli import main
from timetravel.cli.findings_command import opener
from timetravel.farm import FindingsDatabase, parse_seeds, plan_sweep, run_seed

PINGPONG = ["pingpong", "--set", "rtt_max=2390ns", "--set", "rounds=200"]


@pytest.fixture(autouse=True)
def in_a_fresh_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`fuzz` records failing seeds into ./recordings by default: keep that out of the repository."""
    monkeypatch.chdir(tmp_path)


def farm_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def fuzz_json(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = farm_cli(capsys, "fuzz", *argv, "--json", "--workers", "2")
    return code, json.loads(out)


def test_fuzz_json_is_one_summary_and_the_exit_code_says_whether_seeds_failed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "f.db")
    code, summary = fuzz_json(capsys, *PINGPONG, "--seeds", "0:30", "--db", db)
    assert code == 1
    assert summary["ran"] == 30 and summary["failing"] == summary["outcomes"]["fail"] > 0
    assert summary["settings"] == ["rtt_max=2390ns", "rounds=200"] and summary["swarm"] is False
    clean_code, clean = fuzz_json(capsys, "pingpong", "--set", "rounds=50", "--seeds", "0:4", "--db", db)
    assert clean_code == 0 and clean["failing"] == 0
    with FindingsDatabase(db, create=False) as database:
        assert database.count() == 34
        assert database.connection.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_fuzz_prints_a_human_summary(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = str(tmp_path / "f.db")
    code, out, err = farm_cli(capsys, "fuzz", *PINGPONG, "--seeds", "0:30", "--db", db, "--workers", "1")
    assert code == 1 and err == ""  # no progress bar when stderr is not a terminal
    assert out.startswith("pingpong: ran 30 seeds of 0:30 on 1 local worker in ")
    assert "settings: --set rtt_max=2390ns --set rounds=200" in out
    assert f"details: timetravel findings --db {db}" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fuzz", "pingpong", "--seeds", "9:3"], "--seeds 9:3: need 0 <= A < B"),
        (["fuzz", "pingpong", "--seeds", "0:3", "--shard", "2/2"], "--shard expects I/N"),
        (["fuzz", "pingpong", "--seeds", "0:3", "--workers", "0"], "--workers must be at least 1"),
        (["fuzz", "pingpong", "--seeds", "0:3", "--seed-timeout", "0"], "--seed-timeout must be a positive"),
        (["fuzz", "nosuch", "--seeds", "0:3"], "unknown scenario 'nosuch'"),
        (["fuzz", "pingpong", "--seeds", "0:3", "--set", "speed=2"], "unknown config key 'speed'"),
        (["fuzz", "pingpong"], "the following arguments are required: --seeds"),
        (["findings", "--db", "{tmp}/missing.db"], "no findings database at"),
        (["findings", "--db", "{tmp}/text.db"], "is not a findings database"),
        (["findings", "--db", "{tmp}/other.db"], "not a findings database"),
        (["findings", "frobnicate"], "unknown action 'frobnicate'"),
        (["findings", "merge", "--db", "{tmp}/out.db"], "name the databases to merge"),
        (["verify", "--bucket", "x", "--db", "{tmp}/missing.db"], "no findings database at"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    argv: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "text.db").write_text("not sqlite at all, just some text " * 100)
    sqlite3.connect(tmp_path / "other.db").execute("CREATE TABLE t (x)").connection.commit()
    argv = [word.replace("{tmp}", str(tmp_path)) for word in argv]
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's own errors exit from inside parse_args
        code = int(exit_.code or 0)
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("timetravel: error: ") and message in err, err


def test_findings_lists_buckets_with_fault_kinds_earliest_seed_and_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "f.db")
    fuzz_json(capsys, "swarmy", "--scenario", "farm_scenarios:SWARMY", "--seeds", "0:40", "--db", db)
    code, out, _ = farm_cli(capsys, "findings", "--db", db, "--json")
    findings = json.loads(out)
    assert code == 0 and findings["seeds"] == 40
    [bucket] = findings["buckets"]
    assert bucket["signature"] == "oracle:swarmy.crash_lost_data" and bucket["count"] == findings["failing"]
    assert bucket["fault_kinds"]["crash"]["share"] == 1.0 and bucket["fault_kinds"]["drop"]["share"] == 1.0
    assert bucket["fault_kinds"]["crash"]["share_all"] < 1.0
    with FindingsDatabase(db, create=False) as database:
        failing = [row for row in database.rows() if row["signature"]]
    earliest = min(failing, key=lambda row: (row["t_ns"], row["events"], row["seed"]))
    assert bucket["earliest"]["seed"] == earliest["seed"] and bucket["earliest"]["t_ns"] == earliest["t_ns"]
    # the database's module path is untrusted: shown apart, never in a command to paste (issue 32 item 7)
    assert bucket["open_command"] == f"timetravel {opener()} recordings/swarmy-{earliest['seed']}.ttr"
    assert (
        bucket["reproduce_command"] == f"timetravel run swarmy --seed {earliest['seed']} --set faults=swarm"
    )
    assert bucket["scenario_target"] == "farm_scenarios:SWARMY"
    code, out, _ = farm_cli(capsys, "findings", "--db", db)
    assert "signature\n\noracle:swarmy.crash_lost_data  (swarmy)" in out  # a blank line before each bucket
    assert "    crash           100%" in out and f"earliest     seed {earliest['seed']}, fails at " in out


def test_a_finding_opens_its_checked_recording_and_its_run_command_reproduces_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = str(tmp_path / "f.db")
    code, summary = fuzz_json(capsys, *PINGPONG, "--seeds", "0:20", "--db", db, "--record-failures", "recs")
    assert code == 1
    _, out, _ = farm_cli(capsys, "findings", "--db", db, "--json")
    bucket = json.loads(out)["buckets"][0]
    earliest = bucket["earliest"]
    assert earliest["recording"] == f"recs/pingpong-{earliest['seed']}.ttr"
    assert opener() == "tui"  # the best front end in this build
    assert bucket["open_command"] == f"timetravel tui recs/pingpong-{earliest['seed']}.ttr"
    code, out, _ = farm_cli(
        capsys, *bucket["open_command"].split()[1:], "--json", "--at", f"#{earliest['events']}"
    )
    opened = json.loads(out)  # off a terminal, the TUI prints what it would show there
    cursor = opened["cursor"]
    assert code == 0 and (cursor["t_ns"], cursor["event"]) == (earliest["t_ns"], earliest["events"])
    assert opened["events"] == earliest["events"]  # the recording ends at the failure
    assert opened["failure"]["signature"] == bucket["signature"]
    words = bucket["reproduce_command"].split()
    assert words[:2] == ["timetravel", "run"]
    code, out, _ = farm_cli(capsys, *words[1:], "--json")
    report = json.loads(out)
    assert code == 1 and report["failure"]["signature"] == bucket["signature"]
    assert report["failure"]["t_ns"] == earliest["t_ns"]
    first = summary["recordings"][0]
    assert first["seed"] == earliest["seed"] and first["verified"] and first["path"] == earliest["recording"]


def test_baseline_exits_1_only_when_a_signature_is_new(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean, failing = str(tmp_path / "clean.db"), str(tmp_path / "failing.db")
    fuzz_json(capsys, "pingpong", "--set", "rounds=200", "--seeds", "0:6", "--db", clean)
    fuzz_json(capsys, *PINGPONG, "--seeds", "0:20", "--db", failing)
    code, out, _ = farm_cli(capsys, "findings", "--db", failing, "--baseline", clean, "--json")
    comparison = json.loads(out)["baseline"]
    assert code == 1
    assert [bucket["signature"] for bucket in comparison["new"]] == ["assertion:pingpong.rtt_max"]
    code, out, _ = farm_cli(capsys, "findings", "--db", failing, "--baseline", clean)
    assert code == 1 and "NEW   assertion:pingpong.rtt_max (pingpong," in out
    code, out, _ = farm_cli(capsys, "findings", "--db", clean, "--baseline", failing, "--json")
    comparison = json.loads(out)["baseline"]
    assert (
        code == 0
        and comparison["new"] == []
        and comparison["gone"][0]["signature"] == "assertion:pingpong.rtt_max"
    )
    assert farm_cli(capsys, "findings", "--db", failing, "--baseline", failing)[0] == 0


def test_findings_merge_joins_shards(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    shards = [str(tmp_path / f"shard{index}.db") for index in range(2)]
    for index, path in enumerate(shards):
        fuzz_json(capsys, *PINGPONG, "--seeds", "0:10", "--shard", f"{index}/2", "--db", path)
    out_db = str(tmp_path / "all.db")
    code, out, _ = farm_cli(capsys, "findings", "merge", *shards, "--db", out_db, "--json")
    merged = json.loads(out)
    assert code == 0 and merged["seeds"] == 10 and merged["conflicts"] == 0
    assert [entry["inserted"] for entry in merged["inputs"]] == [5, 5]
    code, summary = fuzz_json(capsys, *PINGPONG, "--seeds", "0:10", "--db", out_db)
    assert summary["already_done"] == 10 and summary["ran"] == 0
    with FindingsDatabase(shards[1], create=False) as shard:
        shard.connection.execute("UPDATE seeds SET events = events + 1 WHERE seed = 3")
    code, out, err = farm_cli(capsys, "findings", "merge", shards[1], "--db", out_db)
    assert code == 1 and "conflict: pingpong seed 3: events " in out
    assert err.startswith("timetravel: 1 seeds have rows from the same code that disagree")


def test_verify_sorts_a_bucket_into_fixed_still_failing_and_new(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Today's code is what it is, so the database is made to say the bucket once held other seeds."""
    db = str(tmp_path / "f.db")
    fuzz_json(capsys, *PINGPONG, "--seeds", "0:12", "--db", db)
    with FindingsDatabase(db, create=False) as database:
        rows = list(database.rows())
        passing = [row["seed"] for row in rows if row["outcome"] == "pass"][:2]
        failing = [row["seed"] for row in rows if row["outcome"] == "fail"][:1]
        database.connection.execute(
            f"UPDATE seeds SET outcome = 'fail', signature = 'assertion:pingpong.old' "
            f"WHERE seed IN ({', '.join(map(str, passing + failing))})"
        )
    code, out, _ = farm_cli(
        capsys, "verify", "--bucket", "assertion:pingpong.old", "--db", db, "--json", "--workers", "1"
    )
    result = json.loads(out)
    assert code == 1
    assert result["seeds_by_verdict"] == {
        "fixed": sorted(passing),
        "still_failing": [],
        "new_signature": failing,
    }
    assert result["new_signatures"] == {"assertion:pingpong.rtt_max": 1}
    code, out, _ = farm_cli(
        capsys, "verify", "--bucket", "assertion:pingpong.rtt", "--db", db, "--workers", "1"
    )
    assert code == 1 and "still failing" in out and out.startswith("assertion:pingpong.rtt_max (pingpong): ")
    code, _, err = farm_cli(capsys, "verify", "--bucket", "assertion:pingpong.", "--db", db)
    assert code == 2 and "names 2 buckets" in err


def test_the_numbers_in_docs_farm_md_hold() -> None:
    """docs/farm.md shows a sweep of pingpong 0:1000; its listed failing seeds and earliest seed stay true."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "farm.md").read_text()
    assert "seeds        1 2 3 8 12 27 48 53 55 64 73 75 ..." in text
    assert "earliest     seed 127, fails at 4.51us after 5 events" in text
    plan = plan_sweep("pingpong", ["rtt_max=2390ns", "rounds=200"], parse_seeds("0:76,127"))
    rows = {seed: run_seed(plan.job(seed)) for seed in plan.seeds}
    assert [seed for seed, row in rows.items() if row["outcome"] == "fail" and seed < 76] == [
        1,
        2,
        3,
        8,
        12,
        27,
        48,
        53,
        55,
        64,
        73,
        75,
    ]
    assert (rows[127]["t_ns"], rows[127]["events"]) == (4_510, 5)
    assert all(row["t_ns"] > 4_510 for seed, row in rows.items() if row["outcome"] == "fail" and seed != 127)
