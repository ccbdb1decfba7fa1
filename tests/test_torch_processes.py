"""Nothing a run started outlives it, and Ctrl-C always stops `timetravel torchrun` (issue 32, items 3, 4).

Each rank leads a session of its own, ended with the rank; the zygote is a child subreaper that ends
every descendant when it ends, also when the coordinator is SIGKILLed. A Ctrl-C or SIGTERM at any
moment, even while the process tears down after its command, exits 130 or 143.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from run_processes import (
    GRANDCHILD,
    MARK,
    ROOT,
    grandchild_pid,
    new_mark,
    processes_marked,
    start_torchrun,
    survivors,
)

from timetravel.recording.reader import RecordingReader

RUN_TIMEOUT_S = 200
"""Below the grandchild's 300 s: a run whose `sleep` holds its output pipe open never returns in time."""
STARTED_WAIT_S = 240


def wait_for_grandchild(process: subprocess.Popen[bytes], output: Path) -> int:
    deadline = time.monotonic() + STARTED_WAIT_S
    while time.monotonic() < deadline and process.poll() is None:
        pid = grandchild_pid(output)
        if pid is not None:
            return pid
        time.sleep(0.05)
    raise AssertionError(f"rank 0 never started its grandchild: {output.read_text()[-2000:]}")


def test_a_process_a_rank_started_ends_with_the_run_and_the_summary_says_so() -> None:
    mark = new_mark()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "timetravel", "torchrun", "--nproc-per-node", "2", str(GRANDCHILD), "3"],
            capture_output=True,  # as a caller reading the output: a `sleep` left behind holds the pipe
            text=True,
            timeout=RUN_TIMEOUT_S,
            cwd=ROOT,
            env={**os.environ, MARK: mark},
        )
    finally:
        left = survivors(mark)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "processes_killed: ['r0: sleep']" in done.stdout
    assert left == []


def test_a_sigkilled_coordinator_leaves_no_process_of_its_run_behind(tmp_path: Path) -> None:
    """The zygote learns of its parent's death (PR_SET_PDEATHSIG: SIGTERM) and ends every descendant;
    the ranks died with it before, but the `sleep` rank 0 started was adopted by init and lived on."""
    mark = new_mark()
    output = tmp_path / "out.txt"
    arguments = ["--nproc-per-node", "2", "--record", str(tmp_path / "k.ttr"), str(GRANDCHILD), "100000"]
    process = start_torchrun(mark, arguments, output)
    try:
        wait_for_grandchild(process, output)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    finally:
        left = survivors(mark)
    assert left == []
    with RecordingReader.open(tmp_path / "k.ttr") as reader:
        assert reader.end() is None and reader.manifests()  # a partial recording, readable


LATE_INTERRUPT = """
import atexit, os, signal, sys, time
from timetravel.cli import main
sys.argv = ["timetravel", *sys.argv[1:]]
code = main()
def interrupt():  # runs first of the exit hooks (the newest): the command has returned, the zygote lives
    os.kill(os.getpid(), signal.SIG{name})
    time.sleep(0.2)
atexit.register(interrupt)
sys.exit(code)
"""


def test_a_ctrl_c_while_the_process_tears_down_still_exits_130_not_0(tmp_path: Path) -> None:
    """The signal that was lost in 3 of 35 Ctrl-Cs: it came after the run, while the exit hooks ended
    the zygote, where Python prints and ignores an exception, and the process exited 0."""
    for name, expected in (("INT", 130), ("TERM", 143)):
        mark = new_mark()
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                LATE_INTERRUPT.replace("{name}", name),
                "torchrun",
                "--nproc-per-node",
                "2",
                "--record",
                str(tmp_path / f"{name}.ttr"),
                str(GRANDCHILD),
                "2",
            ],
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            cwd=ROOT,
            env={**os.environ, MARK: mark, "PYTHONPATH": str(ROOT)},
        )
        assert (done.returncode, survivors(mark)) == (expected, []), done.stderr[-2000:]
        assert "outcome: pass" in done.stdout  # the run had ended: the recording is complete
        assert "Traceback" not in done.stderr
        with RecordingReader.open(tmp_path / f"{name}.ttr") as reader:
            assert reader.end() is not None


def test_ctrl_c_during_a_recorded_run_stops_it_at_once_with_a_readable_partial_file(tmp_path: Path) -> None:
    mark = new_mark()
    output = tmp_path / "out.txt"
    recording = tmp_path / "c.ttr"
    process = start_torchrun(
        mark, ["--nproc-per-node", "2", "--record", str(recording), str(GRANDCHILD), "100000"], output
    )
    try:
        wait_for_grandchild(process, output)
        time.sleep(0.5)  # some steps into the run
        sent = time.monotonic()
        os.killpg(process.pid, signal.SIGINT)  # as the terminal does: the whole foreground group
        code = process.wait(timeout=60)
        took_s = time.monotonic() - sent
    finally:
        left = survivors(mark)
    assert (code, left) == (130, []), output.read_text()[-2000:]
    assert took_s < 2.0
    assert "timetravel: interrupted" in output.read_text()
    with RecordingReader.open(recording) as reader:
        assert reader.end() is None and len(reader.manifests()) > 1  # snapshots taken before the Ctrl-C
    assert processes_marked(mark) == []
