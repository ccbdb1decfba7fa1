"""Real torchrun, for ``--against-real``: the user's script under ``torchrun --standalone`` with gloo on
this machine, each rank captured (rank/capture.py), and never a process left behind.

:func:`run_real` starts ``torchrun --standalone --nproc-per-node N --redirects
3 --log-dir LOGS -m timetravel.torch.rank.real_rank CAPTURE (script PATH | module NAME) ARGS`` in a
new session, in a private working directory made as the simulator makes its ranks' (a copy of
``--workdir``, or empty), and waits for it. Each rank's stdout and stderr go to torchrun's log files,
read back per rank. torchrun starts its ranks in sessions of their own, so ending its process group
is not enough: :class:`RealTorchrun` ends torchrun's group and then every descendant's group it can
find, on every way out (an exit, an exception, Ctrl-C, the wall-time limit); and every process dies
with its parent (PR_SET_PDEATHSIG, which rank/real_rank.py sets before it becomes torchrun, and
in each rank),
so even a SIGKILL of this process leaves nothing running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from timetravel.torch.world import workdir

REAL_OUTPUT_BYTES_MAX = 16 * 1024 * 1024
"""Of each rank's stdout and stderr, the last this many bytes are read (a loss per step of a long run
fits many times over)."""
TERMINATE_GRACE_S = 5.0
"""After SIGTERM, how long torchrun gets to end its ranks before everything left is SIGKILLed."""
POLL_S = 0.2
PROCESS_TREE_MAX = 4096
"""Descendants looked for when ending a real run (torchrun, its ranks, their DataLoader workers)."""


@dataclass
class RealRun:
    """What a real torchrun did: its exit code, each rank's output lines, and how long it took."""

    returncode: int
    wall_s: float
    stdout: dict[int, list[str]] = field(default_factory=dict)
    stderr: dict[int, list[str]] = field(default_factory=dict)
    launcher_stderr: list[str] = field(default_factory=list)
    timed_out: bool = False


def real_command(nproc: int, logs: str, capture: str, target: tuple[str, str], args: list[str]) -> list[str]:
    kind, name = target
    return [
        sys.executable,
        "-m",
        "timetravel.torch.rank.real_rank",
        "torchrun",
        "--standalone",
        f"--nproc-per-node={nproc}",
        "--redirects=3",
        f"--log-dir={logs}",
        "-m",
        "timetravel.torch.rank.real_rank",
        capture,
        kind,
        name,
        *args,
    ]


def run_real(
    nproc: int,
    target: tuple[str, str],
    args: list[str],
    capture: str,
    *,
    workdir_source: str | None,
    timeout_s: float,
    progress: Callable[[float], None] | None = None,
) -> RealRun:
    """Run real torchrun (see the module docstring); ``target`` is ("script", path) or ("module", name)."""
    logs = tempfile.mkdtemp(prefix="timetravel-real-logs-")
    directory = workdir.WorkingDirectory.create(workdir_source)
    try:
        command = real_command(nproc, logs, capture, target, args)
        environment = {**os.environ, "PYTHONUNBUFFERED": "1", "PWD": directory.path}
        environment["TIMETRAVEL_LAUNCH_DIR"] = os.getcwd()
        with RealTorchrun(command, cwd=directory.path, env=environment) as real:
            returncode, timed_out = real.wait(timeout_s, progress)
            run = RealRun(returncode, real.wall_s(), timed_out=timed_out, launcher_stderr=real.stderr_lines())
        for rank in range(nproc):
            run.stdout[rank] = _rank_log(logs, rank, "stdout")
            run.stderr[rank] = _rank_log(logs, rank, "stderr")
        return run
    finally:
        directory.close()
        with contextlib.suppress(OSError):
            import shutil

            shutil.rmtree(logs, ignore_errors=True)


class RealTorchrun:
    """The torchrun process and everything below it, ended on ``__exit__`` whatever happened."""

    def __init__(self, command: list[str], *, cwd: str, env: dict[str, str]) -> None:
        self.started = time.monotonic()
        self._stderr = tempfile.TemporaryFile()  # noqa: SIM115  (closed in __exit__)
        self.process = subprocess.Popen(
            command,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._stderr,
            stderr=self._stderr,
            start_new_session=True,
        )

    def __enter__(self) -> RealTorchrun:
        return self

    def wait(self, timeout_s: float, progress: Callable[[float], None] | None) -> tuple[int, bool]:
        """torchrun's exit code (and False), or -1 and True when it ran over ``timeout_s``."""
        deadline = self.started + timeout_s
        while True:
            try:
                return self.process.wait(timeout=POLL_S), False
            except subprocess.TimeoutExpired:
                if time.monotonic() > deadline:
                    self.end()
                    return -1, True
                if progress is not None:
                    progress(self.wall_s())

    def wall_s(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def stderr_lines(self) -> list[str]:
        self._stderr.seek(0)
        data = self._stderr.read()[-REAL_OUTPUT_BYTES_MAX:]
        return data.decode("utf-8", "replace").splitlines()

    def end(self) -> None:
        """SIGTERM torchrun's group (torchrun then ends its ranks), then SIGKILL every group left."""
        groups = self._groups()
        if self.process.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=TERMINATE_GRACE_S)
        for group in [*groups, *self._groups()]:
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=TERMINATE_GRACE_S)

    def _groups(self) -> list[int]:
        """The process groups of torchrun and of every descendant still running (Linux /proc)."""
        groups = [self.process.pid]
        for pid in descendants(self.process.pid):
            with contextlib.suppress(OSError):
                group = os.getpgid(pid)
                if group not in groups and group != os.getpgid(0):
                    groups.append(group)
        return groups

    def __exit__(self, *exc_info: object) -> None:
        try:
            self.end()
        finally:
            self._stderr.close()


def descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (children first), read from /proc; [] where there is none."""
    found: list[int] = []
    pending = [pid]
    while pending and len(found) < PROCESS_TREE_MAX:
        parent = pending.pop()
        for children_file in Path(f"/proc/{parent}/task").glob("*/children"):
            with contextlib.suppress(OSError, ValueError):
                for child in children_file.read_text().split():
                    found.append(int(child))
                    pending.append(int(child))
    return found


def _rank_log(logs: str, rank: int, stream: str) -> list[str]:
    """Rank ``rank``'s stdout or stderr as torchrun's ``--redirects`` wrote it (the last bytes)."""
    for path in sorted(Path(logs).glob(f"*/attempt_*/{rank}/{stream}.log")):
        with open(path, "rb") as handle:
            handle.seek(max(0, path.stat().st_size - REAL_OUTPUT_BYTES_MAX))
            return handle.read().decode("utf-8", "replace").splitlines()
    return []
