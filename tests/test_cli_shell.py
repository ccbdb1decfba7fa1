"""``timetravel shell`` end to end, as a user runs it: subprocesses on a recording made in the test.

Batch input (-c, --script, stdin), --json, exit codes, one-line errors for bad input (a missing or
damaged recording, a wrong command, an unreadable script) and for a replay mismatch, and the
interactive REPL on a pseudo-terminal with persistent history.
"""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import scenario_fixtures
from scenario_fixtures import NONDETERMINISTIC
from shell_recordings import BRANCH

from timetravel.cli import shell_command
from timetravel.explore import Session
from timetravel.recording import record_run
from timetravel.shell import script

RunCli = Callable[..., subprocess.CompletedProcess[str]]
MS = 1_000_000
TESTS = Path(__file__).resolve().parent


def cursor_at(path: Path, target: str, branch: str = "main") -> tuple[int, int]:
    """(events, t_ns) of the cursor after ``goto target``, read through the Session."""
    with Session.open(path, branch=branch) as session:
        position = session.goto(target)
    return position.events, position.t_ns


def test_c_runs_each_command_after_the_prompt_it_ran_at(run_cli: RunCli, needle_recording: Path) -> None:
    events, _ = cursor_at(needle_recording, "20ms")
    done = run_cli("shell", str(needle_recording), "-c", "goto 20; where")
    assert (done.returncode, done.stderr) == (0, "")
    lines = done.stdout.splitlines()
    assert lines[0] == "[main 0ms #0]> goto 20"
    assert f"[main 20ms #{events}]> where" in lines


def test_a_failing_command_stops_the_script_with_one_line_and_exit_code_2(
    run_cli: RunCli, needle_recording: Path, tmp_path: Path
) -> None:
    commands = tmp_path / "repro.tt"
    commands.write_text("# rewind\ngoto 20\ngoto soon\nwhere\n", encoding="utf-8")
    done = run_cli("shell", str(needle_recording), "--script", str(commands))
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        f"timetravel: error: {commands}:3: goto TIME: 'soon': not a time: 'soon' "
        "(examples: 950, 950ms, 1.5s, 120us, 80ns)"
    ]
    assert "> where" not in done.stdout  # the script stopped at the failing command


def test_a_script_on_standard_input_runs_when_it_is_not_a_terminal(needle_recording: Path) -> None:
    events, _ = cursor_at(needle_recording, "40ms", BRANCH)
    done = subprocess.run(
        [sys.executable, "-m", "timetravel", "shell", str(needle_recording)],
        input=f"goto 40 --branch {BRANCH}\nwhere\n",
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(TESTS.parent)},
        timeout=60,
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert f"[{BRANCH} 40ms #{events}]> where" in done.stdout.splitlines()


def test_json_prints_one_object_per_command(run_cli: RunCli, needle_recording: Path) -> None:
    events, t_ns = cursor_at(needle_recording, "#100")
    done = run_cli("shell", str(needle_recording), "--json", "-c", "goto #100; print nodes/w3/total; bogus")
    assert done.returncode == 2
    objects = [json.loads(line) for line in done.stdout.splitlines()]
    assert [item["command"] for item in objects] == ["goto #100", "print nodes/w3/total", "bogus"]
    assert (objects[0]["result"]["event"], objects[0]["result"]["t_ns"]) == (events, t_ns)
    assert objects[2]["error"].startswith("error: unknown command 'bogus'")
    assert done.stderr.startswith("timetravel: error: -c:1: unknown command 'bogus'")


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (None, "No such file or directory"),
        (b"not a recording at all\n", "not a timetravel recording"),
    ],
)
def test_a_missing_or_damaged_recording_is_one_line_and_exit_code_2(
    run_cli: RunCli, tmp_path: Path, content: bytes | None, problem: str
) -> None:
    path = tmp_path / "run.ttr"
    if content is not None:
        path.write_bytes(content)
    done = run_cli("shell", str(path), "-c", "where")
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("timetravel: error: ") and problem in done.stderr
    assert done.stdout == ""


def test_an_unreadable_script_is_bad_input(run_cli: RunCli, needle_recording: Path, tmp_path: Path) -> None:
    binary = tmp_path / "binary.tt"
    binary.write_bytes(b"\xff\xfe goto 1\n")
    done = run_cli("shell", str(needle_recording), "--script", str(binary))
    assert (done.returncode, done.stderr) == (2, f"timetravel: error: {binary}: not a UTF-8 text file\n")
    done = run_cli("shell", str(needle_recording), "--script", str(tmp_path / "absent.tt"))
    assert done.returncode == 2 and done.stderr.startswith("timetravel: error: ")
    assert shell_command.SCRIPT_CHARS_MAX == script.SCRIPT_CHARS_MAX


def test_a_replay_mismatch_is_one_line_and_exit_code_1(run_cli: RunCli, tmp_path: Path) -> None:
    """Recorded with NONDETERMINISTIC's module-level counter at 3; a fresh process starts it at 0,
    so the first re-executed timers differ from the recorded ones."""
    path = tmp_path / "nondeterministic.ttr"
    scenario_fixtures._CALLS[0] = 3
    record_run(NONDETERMINISTIC, NONDETERMINISTIC.resolve_config({"ticks": 300}), 1, path)
    done = run_cli(
        "shell",
        str(path),
        "--scenario",
        "scenario_fixtures:NONDETERMINISTIC",
        "-c",
        "goto #600; where",
        env={"PYTHONPATH": str(TESTS)},
    )
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    assert line.startswith("timetravel: mismatch: -c:1: replay differs at event #")
    assert line.endswith("[cause: determinism_bug]")
    assert "> where" not in done.stdout


# -- the interactive REPL on a pseudo-terminal ------------------------------------------------------

PTY_TIMEOUT_S = 20.0


ESCAPE_SEQUENCE = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]")


def plain(shown: bytes | bytearray) -> bytes:
    """What the terminal shows without its colour and cursor escape sequences."""
    return ESCAPE_SEQUENCE.sub(b"", bytes(shown))


def read_until(descriptor: int, wanted: bytes, seen: bytearray, start: int) -> int:
    """Read the terminal until ``wanted`` appears after plain offset ``start``; the offset after it."""
    deadline = time.monotonic() + PTY_TIMEOUT_S
    while wanted not in plain(seen)[start:]:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"no {wanted!r} on the terminal; it shows {bytes(seen[-400:])!r}"
        ready, _, _ = select.select([descriptor], [], [], remaining)
        if ready:
            try:
                chunk = os.read(descriptor, 4096)
            except OSError:
                chunk = b""
            assert chunk, f"the shell ended before {wanted!r}; it showed {bytes(seen[-400:])!r}"
            seen += chunk
    shown = plain(seen)
    return shown.index(wanted, start) + len(wanted)


def run_on_terminal(args: list[str], keys: list[tuple[bytes, bytes]], env: dict[str, str]) -> tuple[int, str]:
    """Start ``timetravel ARGS`` on a pseudo-terminal; for each (wait for, type) pair, wait for the
    text (after the previous one) and type the keys. The exit code and what the terminal showed.

    Keys are typed only once the prompt is drawn: between two prompts the terminal is in cooked
    mode, where Ctrl-D is the line discipline's end-of-file and never reaches the shell."""
    pid, descriptor = pty.fork()
    if pid == 0:  # the child: become the shell
        os.execvpe(sys.executable, [sys.executable, "-m", "timetravel", *args], env)
    seen = bytearray()
    try:
        offset = 0
        for wanted, typed in keys:
            offset = read_until(descriptor, wanted, seen, offset)
            os.write(descriptor, typed)
        deadline = time.monotonic() + PTY_TIMEOUT_S
        while time.monotonic() < deadline:
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished:
                return os.waitstatus_to_exitcode(status), plain(seen).decode("utf-8", "replace")
            ready, _, _ = select.select([descriptor], [], [], 0.2)
            if ready:
                try:
                    seen += os.read(descriptor, 4096)
                except OSError:  # the child closed the terminal: it is exiting
                    time.sleep(0.05)
        os.kill(pid, 9)
        os.waitpid(pid, 0)
        raise AssertionError(f"the shell did not exit; it showed {bytes(seen[-400:])!r}")
    finally:
        os.close(descriptor)


def test_the_repl_on_a_terminal_runs_typed_commands_and_keeps_its_history(
    needle_recording: Path, tmp_path: Path
) -> None:
    events, _ = cursor_at(needle_recording, "20ms")
    env = {
        **os.environ,
        "PYTHONPATH": str(TESTS.parent),
        "TIMETRAVEL_STATE_DIR": str(tmp_path / "state"),
        "PROMPT_TOOLKIT_NO_CPR": "1",
        "TERM": "xterm",
    }
    code, shown = run_on_terminal(
        ["shell", str(needle_recording)],
        [(b"[main 0ms #0]>", b"goto 20\r"), (b"next:", b""), (f"[main 20ms #{events}]>".encode(), b"\x04")],
        env,
    )
    assert code == 0
    assert f"event #{events} of" in shown
    history = (tmp_path / "state" / "shell_history").read_text(encoding="utf-8")
    assert history.splitlines()[-1] == "+goto 20"

    code, _shown = run_on_terminal(
        ["shell", str(needle_recording), "--no-history"],
        [(b"]>", b"where\r"), (b"next:", b""), (b"]>", b"\x04")],
        env,
    )
    assert code == 0
    assert (tmp_path / "state" / "shell_history").read_text(encoding="utf-8") == history


def test_sigterm_ends_the_shell_at_its_prompt_with_exit_code_143(
    needle_recording: Path, tmp_path: Path
) -> None:
    """SIGTERM stops a command as Ctrl-C does (cli/interrupts.py), but the shell's prompt takes a
    Ctrl-C as "drop this line": a SIGTERM must still end it."""
    env = {**os.environ, "PYTHONPATH": str(TESTS.parent), "TIMETRAVEL_STATE_DIR": str(tmp_path / "state")}
    pid, descriptor = pty.fork()
    if pid == 0:
        os.execvpe(sys.executable, [sys.executable, "-m", "timetravel", "shell", str(needle_recording)], env)
    try:
        read_until(descriptor, b"[main 0ms #0]>", bytearray(), 0)
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + PTY_TIMEOUT_S
        while time.monotonic() < deadline:
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished:
                assert os.waitstatus_to_exitcode(status) == 143
                return
            with contextlib.suppress(OSError):  # keep the terminal drained
                if select.select([descriptor], [], [], 0.1)[0]:
                    os.read(descriptor, 4096)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        raise AssertionError("the shell went on after SIGTERM")
    finally:
        os.close(descriptor)
