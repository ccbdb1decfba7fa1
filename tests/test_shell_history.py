"""History: the state directory, the file format, the bound, and never failing the shell."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from timetravel.shell.history import (
    HISTORY_COMPACT_SLACK,
    BoundedFileHistory,
    default_history_path,
    read_entries,
    state_dir,
)


def test_the_state_dir_follows_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TIMETRAVEL_STATE_DIR", str(tmp_path / "mine"))
    assert default_history_path() == tmp_path / "mine" / "shell_history"
    monkeypatch.delenv("TIMETRAVEL_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "xdg" / "timetravel"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_dir() == tmp_path / "home" / ".local" / "state" / "timetravel"


def test_entries_survive_a_new_session_newest_first(tmp_path: Path) -> None:
    path = tmp_path / "state" / "shell_history"
    first = BoundedFileHistory(path)
    for entry in ("goto 950", "branch --branch-seed 1", "compare main b1"):
        first.append_string(entry)
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    second = BoundedFileHistory(path)
    assert list(second.load_history_strings()) == ["compare main b1", "branch --branch-seed 1", "goto 950"]


def test_the_file_is_compatible_with_prompt_toolkit_file_history(tmp_path: Path) -> None:
    from prompt_toolkit.history import FileHistory

    path = tmp_path / "shell_history"
    BoundedFileHistory(path).append_string("print nodes/rank3")
    assert list(FileHistory(str(path)).load_history_strings()) == ["print nodes/rank3"]


def test_the_file_is_compacted_to_the_newest_entries(tmp_path: Path) -> None:
    path = tmp_path / "shell_history"
    history = BoundedFileHistory(path, entries_max=10)
    for index in range(10 + HISTORY_COMPACT_SLACK):
        history.append_string(f"step {index}")
    assert len(read_entries(path)) == 10 + HISTORY_COMPACT_SLACK
    history.append_string("step last")
    entries = read_entries(path)
    assert entries == [
        f"step {index}" for index in range(HISTORY_COMPACT_SLACK + 1, 10 + HISTORY_COMPACT_SLACK)
    ] + ["step last"]
    assert list(BoundedFileHistory(path, entries_max=3).load_history_strings()) == [
        "step last",
        f"step {9 + HISTORY_COMPACT_SLACK}",
        f"step {8 + HISTORY_COMPACT_SLACK}",
    ]


def test_a_history_that_cannot_be_written_is_reported_not_raised(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    history = BoundedFileHistory(blocker / "shell_history")
    history.append_string("goto 950")
    assert history.write_error is not None and "history not saved" in history.write_error
    assert history.get_strings() == ["goto 950"]


def test_a_huge_or_missing_file_loads_as_empty(tmp_path: Path) -> None:
    assert read_entries(tmp_path / "missing") == []
    huge = tmp_path / "huge"
    with open(huge, "wb") as handle:
        handle.truncate(17 * 1024 * 1024)
    assert read_entries(huge) == []
    assert os.path.getsize(huge) == 17 * 1024 * 1024
