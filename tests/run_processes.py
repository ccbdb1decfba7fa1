"""Finding every process a `timetravel torchrun` started, whatever became of its parent.

A test starts the command with a unique mark in its environment. Every process of the run — the
coordinator, the zygote, each rank, whatever a rank starts (a `sleep` from `subprocess.Popen`), a
rank checkpoint — inherits it, so a scan of `/proc/*/environ` finds them all: in another session,
orphaned, adopted by init. The tests assert that none is left once the command has ended.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARK = "TIMETRAVEL_TEST_RUN_MARK"
SCRIPTS = ROOT / "tests" / "torch_scripts"
GRANDCHILD = SCRIPTS / "spawns_grandchild.py"
"""Rank 0 starts `sleep 300` (printing `grandchild PID`); every rank all_reduces argv[1] times."""
ENDED_WAIT_S = 10.0
"""Wall time for the processes of a run to disappear once its command has exited (SIGKILL is
delivered asynchronously; after a SIGKILL of the coordinator the zygote ends the rest)."""


def new_mark() -> str:
    return uuid.uuid4().hex


def start_torchrun(
    mark: str, arguments: list[str], output: Path, *, cwd: Path = ROOT
) -> subprocess.Popen[bytes]:
    """`python -m timetravel torchrun ARGUMENTS` with ``mark`` in its environment and its output (both
    streams) in the file ``output``: a pipe would be held open by a process the run leaves behind.
    With faulthandler on: a SIGABRT prints the stacks of its threads there (a test's view of a hang)."""
    environment = {**os.environ, MARK: mark, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": "1"}
    with output.open("wb") as sink:
        return subprocess.Popen(
            [sys.executable, "-m", "timetravel", "torchrun", *arguments],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=environment,
            cwd=cwd,
            start_new_session=True,  # its own process group: a Ctrl-C is sent to the group
        )


def processes_marked(mark: str) -> list[str]:
    """``PID NAME`` of every live process whose environment holds ``mark``."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environment = Path(f"/proc/{entry}/environ").read_bytes()
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state = stat[stat.rfind(")") + 2 :].split()[0]
        if needle in environment.split(b"\0") and state not in ("Z", "X"):
            found.append(f"{entry} {stat[stat.find('(') + 1 : stat.rfind(')')]}")
    return found


def survivors(mark: str, wait_s: float = ENDED_WAIT_S) -> list[str]:
    """The processes marked ``mark`` still alive ``wait_s`` after the caller's command ended (sooner
    when none is left). Any found are killed: a failing test leaves nothing behind either."""
    deadline = time.monotonic() + wait_s
    while True:
        left = processes_marked(mark)
        if not left or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    for entry in left:
        with contextlib.suppress(OSError):
            os.kill(int(entry.split()[0]), signal.SIGKILL)
    return left


def grandchild_pid(output: Path) -> int | None:
    """The pid rank 0 of spawns_grandchild.py printed, if it got that far."""
    for line in output.read_text(errors="replace").splitlines():
        if line.startswith("[r0] grandchild "):
            return int(line.split()[-1])
    return None
