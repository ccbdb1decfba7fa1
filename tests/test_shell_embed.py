"""``Shell`` from Python: the shell's commands and renderers without the prompt; errors are exceptions."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from rich.console import Console
from shell_recordings import BRANCH

from timetravel.explore import Session
from timetravel.explore.commands import CommandError
from timetravel.explore.results import CursorResult
from timetravel.shell import Shell
from timetravel.shell.results import PlotResult


def test_calling_the_shell_shows_each_result_and_run_returns_it(needle_recording: Path) -> None:
    with Session.open(needle_recording) as session:
        events = session.goto("20ms").events
        total = session.world.nodes["w3"]["total"]
    out = io.StringIO()
    with Shell.open(needle_recording, console=Console(file=out, width=100, color_system=None)) as shell:
        assert repr(shell) == f"<Shell {needle_recording} [main 0ms #0]>"
        assert shell("goto 20; print nodes/w3/total") is None
        assert f"event #{events} of" in out.getvalue() and f"total  int  {total}" in out.getvalue()
        cursor = shell.run("where")
        assert isinstance(cursor, CursorResult) and cursor.event == events and shell.last is cursor
        assert shell.prompt == f"[main 20ms #{events}]> "
        assert shell.session.world.nodes["w3"]["total"] == total
        assert shell.complete("print nodes/w3/tot") == ["nodes/w3/total"]
        assert isinstance(shell.run(f"plot main {BRANCH} --metric retransmits"), PlotResult)
        with pytest.raises(CommandError, match="unknown command 'bogus'"):
            shell.run("bogus")
    assert repr(shell) == "<Shell (closed)>"


def test_a_shell_opens_on_a_branch(needle_recording: Path) -> None:
    with Shell.open(needle_recording, branch=BRANCH, console=Console(file=io.StringIO())) as shell:
        assert shell.session.branch == BRANCH
        assert shell.prompt == f"[{BRANCH} 0ms #0]> "
