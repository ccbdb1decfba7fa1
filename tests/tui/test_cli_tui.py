"""``timetravel tui PATH`` / ``timetravel open PATH``: the headless summary without a terminal, and
bad input as one line with exit code 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from timetravel.cli import main
from timetravel.explore.session import Session

FABRIC_TARGET = "tests.fabric_example:SCENARIO"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_without_a_terminal_it_prints_what_the_debugger_shows_at_the_failure(
    needle_recording: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, report = needle_recording
    with Session.open(path) as session:
        snapshots = len(session.snapshots())
        session.goto_time(report["failure"]["t_ns"])
        slow = sorted(
            fault["target"]
            for fault in session.world.faults
            if fault["kind"] == "slow" and fault["t_start"] <= session.world.t_ns < fault["t_end"]
        )
    code, out, err = run(capsys, "tui", str(path))
    lines = out.splitlines()
    assert (code, err) == (0, "")
    assert lines[0] == f"needle seed 1 · {path}"
    assert lines[1] == (
        f"  main: ✖ assertion on w0 @85.021491ms · {report['events']} events to 85.021491ms, {snapshots} snapshots"
    )
    assert f"    {'85.021491ms':>14}  failure  assertion on w0 @85.021491ms" in lines
    ranks_line = next(line for line in lines if line.startswith("  ranks at "))
    assert ranks_line.startswith(f"  ranks at 85.021491ms (event #{report['events']}): ")
    assert [line.strip() for line in lines if line.startswith("    w")] == [f"{name}: slow" for name in slow]
    assert lines[-1] == f"  (no terminal here: run `timetravel tui {path}` in one to open the debugger)"


def test_json_and_the_open_alias_at_a_chosen_time(
    needle_recording: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, report = needle_recording
    code, out, _err = run(capsys, "open", str(path), "--json", "--at", "40")
    data = json.loads(out)
    with Session.open(path) as session:
        session.goto("40")
        events = session.position.events
    assert code == 0
    assert data["cursor"] == {"t_ns": 40_000_000, "event": events}
    assert (data["title"], data["branch"], data["events"]) == ("needle seed 1", "main", report["events"])
    assert data["status"] == "✖ assertion on w0 @85.021491ms"
    assert data["failure"] == {
        key: report["failure"][key] for key in ("kind", "node", "t_ns", "message", "signature")
    }
    assert data["branches"] == [{"name": "main", "parent": None, "at_ns": None, "outcome": "fail"}]
    code, out, _err = run(capsys, "tui", str(path), "--headless", "--at", "#12")
    assert code == 0 and "(event #12)" in out and "no terminal here" not in out


def test_a_scenario_from_a_module_needs_the_users_opt_in(
    fabric_recording: tuple[Path, dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    path, _report = fabric_recording
    code, _out, err = run(capsys, "tui", str(path))
    assert (
        code == 2 and err.startswith("timetravel: error: scenario 'fabric_example'") and err.count("\n") == 1
    )
    code, out, _err = run(capsys, "tui", str(path), "--scenario", FABRIC_TARGET, "--branch", "b1", "--json")
    assert code == 0 and json.loads(out)["branch"] == "b1"


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["nowhere.ttr"], "No such file or directory"),
        (["{path}", "--at", "soon"], "soon"),
        (["{path}", "--at", "-5"], "must not be negative"),
        (["{path}", "--branch", "b9"], "no branch 'b9'"),
    ],
)
def test_bad_input_is_one_line_and_exit_code_2(
    needle_recording: tuple[Path, dict[str, Any]],
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    message: str,
) -> None:
    path, _report = needle_recording
    code, out, err = run(capsys, "tui", *[argument.format(path=path) for argument in arguments])
    assert (code, out) == (2, "")
    assert err.startswith("timetravel: error: ") and err.count("\n") == 1 and message in err


def test_a_file_that_is_not_a_recording_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "notes.ttr"
    bogus.write_text("not a recording\n")
    code, _out, err = run(capsys, "open", str(bogus))
    assert code == 2 and err.startswith("timetravel: error: ") and err.count("\n") == 1
