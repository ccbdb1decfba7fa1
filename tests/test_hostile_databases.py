"""A findings database is untrusted input: the scenario module it names is data, never imported."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from timetravel.cli import main
from timetravel.farm import FindingsDatabase

PINGPONG = ["pingpong", "--set", "rtt_max=2390ns", "--set", "rounds=200"]
PLANTED_MODULE = "hostile_planted_module"
PLANTED_CODE = """
from pathlib import Path
Path(__file__).with_name("IMPORTED").write_text("the database made timetravel import me")
from timetravel.scenarios import get_scenario
SCENARIO = get_scenario("pingpong")
"""


@pytest.fixture
def planted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module on sys.path that leaves a file behind if anyone imports it (worker processes too)."""
    folder = tmp_path / "planted"
    folder.mkdir()
    (folder / f"{PLANTED_MODULE}.py").write_text(PLANTED_CODE)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setenv("PYTHONPATH", f"{folder}:{Path(__file__).parent}")
    monkeypatch.chdir(tmp_path)
    sys.modules.pop(PLANTED_MODULE, None)
    yield folder / "IMPORTED"
    sys.modules.pop(PLANTED_MODULE, None)


def _database_naming_the_module(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    db = str(tmp_path / "sent.db")
    assert main(["fuzz", *PINGPONG, "--seeds", "0:6", "--db", db, "--workers", "1", "--json"]) == 1
    capsys.readouterr()
    with FindingsDatabase(db, create=False) as database:
        database.connection.execute("UPDATE sweeps SET scenario_target = ?", (f"{PLANTED_MODULE}:SCENARIO",))
    return db


def test_verify_never_imports_the_module_a_database_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: Path
) -> None:
    db = _database_naming_the_module(tmp_path, capsys)
    code = main(["verify", "--bucket", "assertion:pingpong.rtt", "--db", db, "--workers", "1", "--json"])
    out = capsys.readouterr().out
    assert code == 1 and json.loads(out)["still_failing"] > 0
    assert not planted.exists() and PLANTED_MODULE not in sys.modules


def test_verify_imports_the_scenario_the_user_names(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: Path
) -> None:
    db = _database_naming_the_module(tmp_path, capsys)
    argv = ["verify", "--bucket", "assertion:pingpong.rtt", "--db", db, "--workers", "1", "--json"]
    code = main([*argv, "--scenario", f"{PLANTED_MODULE}:SCENARIO"])
    capsys.readouterr()
    assert code == 1 and planted.exists()


def test_findings_and_merge_keep_the_stored_module_as_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], planted: Path
) -> None:
    db = _database_naming_the_module(tmp_path, capsys)
    assert main(["findings", "--db", db]) == 0
    listing = capsys.readouterr().out
    # shown as untrusted, so the user decides, and never in a command meant to be pasted
    assert f"the database says its scenario code is '{PLANTED_MODULE}:SCENARIO': check that module" in listing
    assert "--scenario" not in "".join(line for line in listing.splitlines() if "timetravel " in line)
    assert main(["findings", "--db", db, "--json"]) == 0
    [bucket] = json.loads(capsys.readouterr().out)["buckets"]
    assert bucket["scenario_target"] == f"{PLANTED_MODULE}:SCENARIO"
    assert PLANTED_MODULE not in bucket["open_command"] + bucket["reproduce_command"]
    out_db = str(tmp_path / "merged.db")
    assert main(["findings", "merge", db, "--db", out_db]) == 0
    merged = capsys.readouterr().out
    assert (
        f"its sweeps name scenario code '{PLANTED_MODULE}:SCENARIO': kept as data, never imported" in merged
    )
    with FindingsDatabase(out_db, create=False) as database:
        assert {sweep.scenario_target for sweep in database.sweeps().values()} == {
            f"{PLANTED_MODULE}:SCENARIO"
        }
    assert not planted.exists() and PLANTED_MODULE not in sys.modules


def test_a_database_path_that_is_a_fifo_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import os

    fifo = tmp_path / "f.db"
    os.mkfifo(fifo)
    for argv in (["findings", "--db", str(fifo)], ["verify", "--bucket", "x", "--db", str(fifo)]):
        assert main(argv) == 2
        assert capsys.readouterr().err == f"timetravel: error: {fifo}: a FIFO, not a regular file\n"


def test_a_setting_from_a_database_may_not_name_a_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32 item 7: ``verify`` resolved the database's ``faults=@/dev/zero`` and read until it
    ran out of memory. A stored setting that names a file is refused, even a readable one, unless
    the user sets that key now."""
    monkeypatch.chdir(tmp_path)
    Path("needle.json").write_text('"needle"')
    db = str(tmp_path / "n.db")
    sweep = ["fuzz", "needle", "--seeds", "0:2", "--set", "rounds=12", "--set", "faults=@needle.json"]
    assert main([*sweep, "--db", db, "--workers", "1", "--recordings-per-signature", "0"]) == 1
    capsys.readouterr()
    verify = ["verify", "--bucket", "assertion:needle.total", "--db", db, "--workers", "1", "--json"]
    for stored in ("faults=@needle.json", "faults=@/dev/zero"):
        with FindingsDatabase(db, create=False) as database:
            database.connection.execute(
                "UPDATE sweeps SET settings = ?", (json.dumps(["rounds=12", stored]),)
            )
        assert main(verify) == 2
        err = capsys.readouterr().err
        assert err == (
            f"timetravel: error: config key 'faults': '{stored[7:]}' names a file, which a setting from a "
            "findings database may not (--set faults=... replaces it)\n"
        )
    assert main([*verify, "--set", "faults=@needle.json"]) == 1  # the user's own file: read
    assert json.loads(capsys.readouterr().out)["still_failing"] == 2


def test_an_empty_file_is_not_a_findings_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 32 item 12: every command that reads a database refused nothing in an empty file (it
    listed 0 seeds, or made the file a database); an empty file stays empty and is one line."""
    import sqlite3

    empty = tmp_path / "empty.db"
    empty.touch()
    no_tables = tmp_path / "no-tables.db"
    sqlite3.connect(no_tables).execute("PRAGMA user_version = 1").connection.close()
    good = str(tmp_path / "good.db")
    sweep = [
        "fuzz",
        *PINGPONG,
        "--seeds",
        "0:2",
        "--db",
        good,
        "--workers",
        "1",
        "--recordings-per-signature",
        "0",
    ]
    assert main([*sweep, "--json"]) in (0, 1)
    capsys.readouterr()
    for path, what in ((empty, "an empty file"), (no_tables, "an SQLite file with no tables")):
        for argv in (
            ["findings", "--db", str(path)],
            ["findings", "--db", good, "--baseline", str(path)],
            ["findings", "merge", str(path), "--db", str(tmp_path / "out.db")],
            ["verify", "--bucket", "x", "--db", str(path)],
        ):
            assert main(argv) == 2, argv
            assert capsys.readouterr().err == (
                f"timetravel: error: {path} is {what}, not a findings database (run `timetravel fuzz` first)\n"
            )
    assert empty.stat().st_size == 0 and not (tmp_path / "out.db").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(("empty", "no-tables"))) == [
        "empty.db",
        "no-tables.db",
    ]


def test_findings_never_puts_a_script_the_database_names_in_a_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A torch sweep's ``script=PATH`` pasted from ``findings`` would run that file: the commands say
    ``script=SCRIPT`` and the stored path is shown apart, as untrusted."""
    db = str(tmp_path / "sent.db")
    assert main(["fuzz", *PINGPONG, "--seeds", "0:6", "--db", db, "--workers", "1", "--json"]) == 1
    capsys.readouterr()
    evil = str(tmp_path / "evil.py")
    with FindingsDatabase(db, create=False) as database:
        database.connection.execute("UPDATE sweeps SET settings = ?", (json.dumps([f"script={evil}"]),))
    assert main(["findings", "--db", db]) == 0
    listing = capsys.readouterr().out
    commands = [line for line in listing.splitlines() if "timetravel " in line]
    assert commands and not any(evil in line for line in commands)
    assert any("script=SCRIPT" in line for line in commands)
    assert f"the database says the sweep ran the script '{evil}'" in listing
    assert main(["findings", "--db", db, "--json"]) == 0
    [bucket] = json.loads(capsys.readouterr().out)["buckets"]
    assert bucket["scripts"] == [evil]
    assert evil not in bucket["open_command"] + bucket["reproduce_command"]
