"""The real program in a real terminal: ``timetravel tui`` inside tmux, driven with send-keys and read
with capture-pane — what Pilot cannot see (the terminal, the entry point, startup, quitting).

tmux runs on a socket of its own (``-L``), so the test never touches a user's tmux server, and the
server is killed at the end. ``make tools`` installs tmux where it is missing (CI does that).

A test waits for every text it asserts on, all on one capture (``wait_for`` takes several): a frame
reaches tmux in pieces, so under load a capture can show the new frame's title above the old
frame's status line (issue 32 item 11: the title said 80ms, the line below it had not been drawn).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPOSITORY_ROOT
from tests.tui.test_flow import root_cause
from timetravel.scenarios.dp_training.params import DEMO_SEED
from timetravel.sim.timefmt import format_time

COLUMNS, LINES = 120, 36
WAIT_S = 30.0
"""How long one expected screen may take to appear (startup imports Textual; a seek replays)."""
POLL_S = 0.1


class Tmux:
    """One tmux server on a private socket, one window running a command."""

    def __init__(self, socket: str) -> None:
        self.socket = socket
        self.socket_path = ""

    def run(self, *args: str) -> str:
        result = subprocess.run(
            ["tmux", "-L", self.socket, *args], capture_output=True, text=True, check=True, timeout=10
        )
        return result.stdout

    def start(self, command: str) -> None:
        self.run("new-session", "-d", "-s", "tt", "-x", str(COLUMNS), "-y", str(LINES), command)
        self.socket_path = self.run("display-message", "-p", "#{socket_path}").strip()

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "tt")

    def keys(self, *keys: str) -> None:
        self.run("send-keys", "-t", "tt", *keys)

    def type(self, text: str) -> None:
        self.run("send-keys", "-t", "tt", "-l", text)

    def wait_for(self, *texts: str, present: bool = True) -> str:
        """The first screen on which every one of ``texts`` is there (``present=False``: none is)."""
        deadline = time.monotonic() + WAIT_S
        screen = ""
        while time.monotonic() < deadline:
            screen = self.screen()
            if all((text in screen) == present for text in texts):
                return screen
            time.sleep(POLL_S)
        verb = "appear" if present else "go away"
        raise AssertionError(f"{texts!r} did not all {verb} within {WAIT_S} s; the screen:\n{screen}")

    def command(self, line: str) -> None:
        """``:``, a command line and enter, sent in one burst as a paste would be (the App moves
        the focus to the prompt before it hands on the keys that follow)."""
        self.type(f":{line}")
        self.keys("Enter")


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    assert shutil.which("tmux"), "tmux is not installed: `make tools` installs it"
    server = Tmux(f"timetravel-test-{os.getpid()}")
    try:
        yield server
    finally:
        subprocess.run(["tmux", "-L", server.socket, "kill-server"], capture_output=True, timeout=10)
        if server.socket_path:
            Path(server.socket_path).unlink(missing_ok=True)  # kill-server leaves the socket file


def tui_command(path: Path, *arguments: str) -> str:
    environment = f"PYTHONPATH={REPOSITORY_ROOT} TERM=xterm-256color"
    program = f"{sys.executable} -m timetravel tui {path} {' '.join(arguments)}"
    return f"cd {REPOSITORY_ROOT} && env {environment} {program}; echo EXITED $?; sleep 60"


def test_open_rewind_and_quit_in_a_real_terminal(
    tmux: Tmux, needle_recording: tuple[Path, dict[str, Any]]
) -> None:
    path, report = needle_recording
    tmux.start(tui_command(path))
    tmux.wait_for(
        "needle seed 1 · main · 85.021491ms #474 · ✖ assertion on w0 @85.021491ms"
    )  # at the failure
    tmux.wait_for("needle seed 1 · at the failure")
    tmux.wait_for(f"events {report['events']}")  # the event log indexed the recording
    tmux.command("goto 80")
    tmux.wait_for("needle seed 1 · main · 80ms #", "main at 80ms, event #")
    tmux.command("goto 75")
    tmux.wait_for("needle seed 1 · main · 75ms #", "main at 75ms, event #")
    tmux.keys("?")
    tmux.wait_for("keys · esc closes")
    tmux.keys("Escape")
    tmux.keys("Home")
    tmux.wait_for("needle seed 1 · main · 0ms #")
    tmux.keys("q")
    tmux.wait_for("EXITED 0")


def test_the_used_by_flow_in_a_real_terminal(tmux: Tmux, demo: Path) -> None:
    """Open the demo failing seed, goto 1000, rewind to 950, branch without the root-cause fault,
    compare the two futures, open the corrupted gradient's diff, go back and quit."""
    failure, cause = root_cause(demo)
    rank, t_start = failure["node"], format_time(cause["t_start"], "ms")
    tmux.start(tui_command(demo))
    at_failure = format_time(failure["t_ns"], "ms")
    tmux.wait_for(f"dp_training seed {DEMO_SEED} · main · {at_failure} #")  # it opens at the failure
    tmux.command("goto 1000")
    tmux.wait_for("· main · 1000ms #")
    tmux.command("goto 950")
    tmux.wait_for("· main · 950ms #")
    tmux.command(f"branch --drop-fault {cause['id']}")
    tmux.wait_for(f"b1: from main at 950ms [drop-fault {cause['id']}] -> pass")
    tmux.keys("4")
    tmux.wait_for("b1 @950ms")  # the tree lists the new branch before the cursor moves onto it
    tmux.keys("Down", "c")
    corrupted = f"nodes/{rank}/grad_pending"
    screen = tmux.wait_for(f"first divergence {t_start}: fault on {rank}", "✖ fail", "✔ pass", corrupted)
    lines = screen.splitlines()
    header = next(number for number, line in enumerate(lines) if line.startswith("│ path "))
    rows = lines[header + 1 : next((n for n in range(header, len(lines)) if lines[n].startswith("╰")), None)]
    index = next(number for number, line in enumerate(rows) if line.startswith(f"│ {corrupted}"))
    tmux.keys(*["Down"] * index, "Enter")
    tmux.wait_for(f"diff {corrupted} @{t_start}: main | b1", f"╭─ main @{t_start}", f"╭─ b1 @{t_start}")
    tmux.keys("Escape")
    tmux.wait_for("first divergence")
    tmux.keys("Escape")
    tmux.wait_for("· main · 950ms #")
    tmux.keys("q")
    tmux.wait_for("EXITED 0")


def test_a_recording_cannot_retitle_or_clear_the_terminal(tmux: Tmux, tmp_path: Path) -> None:
    """Issue 32 item 8: a branch named ``b1\\x1b]0;PWNED\\x07...`` retitled the terminal from the
    branch tree. Every widget draws its text escaped (tui/safe_lines.py)."""
    from tests.hostile_corpus import with_terminal_escapes
    from timetravel.cli import main

    source = tmp_path / "source.ttr"
    assert main(["run", "pingpong", "--seed", "3", "--set", "rtt_max=2390ns", "--record", str(source)]) == 1
    assert main(["branch", str(source), "--at", "10us", "--branch-seed", "3"]) in (0, 1)
    path, _branch = with_terminal_escapes(source, tmp_path / "escaped.ttr")
    tmux.start(tui_command(path))
    tmux.wait_for("pingpong seed 3 · main")
    tmux.keys("4")
    screen = tmux.wait_for("└── ▼ b1\\x1b]0;PWNED\\x1b[2J\\x9b31m\\u202e @0.01")
    assert "pingpong seed 3 · main" in screen  # not cleared
    assert "PWNED" not in tmux.run("display-message", "-p", "-t", "tt", "#{pane_title}")
    tmux.keys("q")
    tmux.wait_for("EXITED 0")
