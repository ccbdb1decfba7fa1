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
    assert f"--scenario {PLANTED_MODULE}:SCENARIO" in listing  # shown, so the user decides
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
