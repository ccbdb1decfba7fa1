"""`torchrun --record` stopped by SIGINT, SIGTERM or SIGKILL at seeded moments (issue 32's soak).

The run: two ranks all_reducing for minutes, rank 0 having started a `sleep` of its own (a grandchild
of the run). Each signal is sent at a moment drawn from a seeded stream, from the interpreter's start
through the zygote's (torch's import) into the run: SIGINT to the whole process group, as a terminal's
Ctrl-C does; SIGTERM and SIGKILL to the coordinator alone, as `kill` does. After every one: the exit
code is 130, 143 or 137 (SIGINT within 2 s), the partial recording opens, and no process of the run —
coordinator, zygote, rank, grandchild — is left (tests/run_processes.py finds them by a mark in their
environment, wherever they were reparented).

Sized by TIMETRAVEL_SLOW: ``ci`` sends each signal at 3 moments (about two minutes), ``full`` at 50.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest
from conftest import slow_size
from run_processes import GRANDCHILD, new_mark, start_torchrun, survivors

from timetravel.recording.reader import RecordingReader

MOMENTS = {"ci": 3, "full": 50}
"""Moments per signal."""
MOMENT_FIRST_S = 0.2
"""The earliest moment: before it the interpreter has not even read `timetravel` (nothing to test)."""
MOMENT_LAST_S = 15.0
"""The latest: the zygote has started (torch imported: 3-10 s on a busy 2-core machine) and the ranks
have run for a while."""
SOAK_SEED = 32
SIGINT_EXIT_WAIT_S = 2.0
"""Issue 32: a Ctrl-C stops the run within a second or two."""
EXIT_WAIT_S = 60.0
STEPS = "1000000"
"""More than any moment reaches: the run never ends before its signal."""


def moments(signal_number: int) -> list[float]:
    stream = random.Random(f"{SOAK_SEED}:{signal_number}")
    return [stream.uniform(MOMENT_FIRST_S, MOMENT_LAST_S) for _ in range(MOMENTS[slow_size()])]


def shell_code(returncode: int) -> int:
    """The exit code a shell shows: 128 + the signal for a process the signal ended."""
    return 128 - returncode if returncode < 0 else returncode


@pytest.mark.slow
@pytest.mark.parametrize(
    "signal_number", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name
)
def test_torchrun_record_stopped_at_seeded_moments_leaves_a_readable_file_and_no_process(
    signal_number: signal.Signals, tmp_path: Path
) -> None:
    problems = []
    for index, moment in enumerate(moments(signal_number)):
        problem = _stop_once(signal_number, moment, tmp_path / f"{index}")
        if problem is not None:
            problems.append(f"at {moment:.2f} s: {problem}")
    assert not problems, "\n\n".join(problems)


def _wait(process: subprocess.Popen[bytes]) -> int | None:
    """The exit code, or None past EXIT_WAIT_S (then the stacks of the coordinator's threads are
    printed to its output: start_torchrun enables faulthandler, which SIGABRT triggers)."""
    try:
        return process.wait(timeout=EXIT_WAIT_S)
    except subprocess.TimeoutExpired:
        os.kill(process.pid, signal.SIGABRT)
        process.wait()
        return None


def _stop_once(signal_number: signal.Signals, moment: float, folder: Path) -> str | None:
    """Start the run, send the signal at ``moment`` seconds, and say what went wrong (None: nothing)."""
    folder.mkdir()
    mark, output, recording = new_mark(), folder / "output.txt", folder / "run.ttr"
    arguments = ["--nproc-per-node", "2", "--record", str(recording), str(GRANDCHILD), STEPS]
    process = start_torchrun(mark, arguments, output)
    try:
        time.sleep(moment)
        sent = time.monotonic()
        if signal_number == signal.SIGINT:
            os.killpg(process.pid, signal_number)
        else:
            os.kill(process.pid, signal_number)
        returncode = _wait(process)
        took_s = time.monotonic() - sent
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        left = survivors(mark)
    text = output.read_text(errors="replace")
    if returncode is None:
        return f"still running {EXIT_WAIT_S:g} s after the signal; its threads then: {text[-6000:]}"
    expected = 128 + signal_number
    if shell_code(returncode) != expected:
        return f"exit code {returncode}, not {expected}: {text[-1000:]}"
    if signal_number == signal.SIGINT and took_s > SIGINT_EXIT_WAIT_S:
        return f"exited {took_s:.2f} s after the Ctrl-C"
    if left:
        return f"left running: {left}"
    if "Traceback" in text:
        return f"a traceback: {text[-2000:]}"
    if recording.exists():
        try:
            with RecordingReader.open(recording) as reader:
                reader.describe_loss()
        except Exception as error:  # any reason it does not open is the finding
            return f"the partial recording does not open: {error}"
    return None
