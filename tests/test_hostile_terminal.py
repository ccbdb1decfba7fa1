"""No terminal escape from a recording or a database reaches the terminal (issue 32 item 8).

A recording whose branch names, failure and notes hold ``\\x1b]0;...\\x07`` (retitle), ``\\x1b[2J``
(clear), a C1 CSI and a right-to-left override, and a findings database whose signatures and
module path hold them, go through every command that shows them: the output holds each control
character escaped (``\\x1b``), never the character itself. The TUI in a real terminal is checked in
tests/tui/test_tmux.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hostile_corpus import TERMINAL_ESCAPES, with_terminal_escapes

from timetravel.cli import main
from timetravel.farm import FindingsDatabase

PINGPONG_FAILS = ["pingpong", "--seed", "3", "--set", "rtt_max=2390ns", "--set", "rounds=200"]
CONTROL_CHARACTERS = ("\x1b", "\x07", "\x9b", "\u202e")


@pytest.fixture(scope="module")
def escaped(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("escapes")
    source = folder / "source.ttr"
    assert main(["run", *PINGPONG_FAILS, "--record", str(source)]) == 1
    assert main(["branch", str(source), "--at", "10us", "--branch-seed", "3"]) in (0, 1)
    return with_terminal_escapes(source, folder / "escaped.ttr")


def run(capsys: pytest.CaptureFixture[str], argv: list[str]) -> tuple[int, str]:
    try:
        code = main(argv)
    except SystemExit as stop:
        code = int(stop.code or 0)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def assert_escaped(argv: list[str], output: str, *, shown: bool = True) -> None:
    for character in CONTROL_CHARACTERS:
        assert character not in output, (argv, character, output)
    if shown:  # shown escaped, so the user sees it is there
        assert "\\x1b]0;PWNED" in output, (argv, output)


def test_no_command_lets_a_recording_reach_the_terminal(
    escaped: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    path, branch = escaped
    p = str(path)
    commands: list[list[str]] = [
        ["branches", p],
        ["explain", p, "--branch", branch],
        ["explain", p],
        ["replay", p],
        ["compare", p, "main", branch],
        ["faults", p, "--branch", branch],
        ["branch", p, "--at", "5us", "--from", branch, "--branch-seed", "5"],
        ["shell", p, "-c", f"branches; goto end; where; explain; compare main '{branch}'"],
        ["tui", p, "--headless"],
        ["explain", p, "--branch", f"missing{TERMINAL_ESCAPES}"],  # an error quoting the input
    ]
    for argv in commands:
        code, output = run(capsys, argv)
        assert code in (0, 1, 2), (argv, output)
        assert_escaped(argv, output, shown=argv[0] != "faults")


def test_no_findings_line_lets_a_database_reach_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    db = str(tmp_path / "f.db")
    assert (
        main(["fuzz", "pingpong", *PINGPONG_FAILS[3:], "--seeds", "0:4", "--db", db, "--workers", "1"]) == 1
    )
    with FindingsDatabase(db, create=False) as database:
        database.connection.execute("UPDATE seeds SET signature = signature || ?", (TERMINAL_ESCAPES,))
        database.connection.execute("UPDATE sweeps SET scenario_target = ?", (f"m{TERMINAL_ESCAPES}:X",))
    capsys.readouterr()
    outputs: dict[str, Any] = {}
    for argv in (["findings", "--db", db], ["findings", "--db", db, "--baseline", str(tmp_path / "f.db")]):
        code, outputs[argv[-1]] = run(capsys, argv)
        assert code == 0
        assert_escaped(argv, outputs[argv[-1]])
    code, output = run(capsys, ["verify", "--bucket", "assertion", "--db", db, "--workers", "1"])
    assert_escaped(["verify"], output)
