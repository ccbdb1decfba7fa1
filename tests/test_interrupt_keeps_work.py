"""Interrupting long work keeps what it did: Ctrl-C during `minimize` writes the best repro so far
and says it is partial; `fuzz` interrupted before any seed says only that. Real subprocesses, real
SIGINT, as a user's terminal sends it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from interrupt_scenarios import SLOW_NEEDLE

from timetravel.explore import Session
from timetravel.recording import record_run

REPOSITORY = Path(__file__).resolve().parent.parent
TARGET = "tests.interrupt_scenarios:SLOW_NEEDLE"
SECONDS_BEFORE_INTERRUPT = 6.0
"""Start-up, the original run and a few candidates (a run takes ~0.5 s; the search ~100 runs)."""


def _start(arguments: list[str], folder: Path) -> subprocess.Popen[str]:
    environment = {
        **os.environ,
        "PYTHONPATH": str(REPOSITORY) + os.pathsep + os.environ.get("PYTHONPATH", ""),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "timetravel", *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environment,
        cwd=folder,
    )


def _slow_recording(folder: Path) -> Path:
    path = folder / "slow.ttr"
    report, _ = record_run(SLOW_NEEDLE, SLOW_NEEDLE.resolve_config({}), 0, path, snapshot_every_events=256)
    assert report["failure"]["signature"] == "assertion:needle.total"
    return path


def test_ctrl_c_during_minimize_writes_the_best_repro_so_far_and_says_it_is_partial(tmp_path: Path) -> None:
    recording = _slow_recording(tmp_path)
    process = _start(
        ["minimize", str(recording), "--scenario", TARGET, "--out", "m.ttr", "--pytest", "test_m.py"],
        tmp_path,
    )
    time.sleep(SECONDS_BEFORE_INTERRUPT)
    assert process.poll() is None, "the minimization ended before the interrupt"
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=120)
    assert process.returncode == 130, out + err
    assert "stopping after this run to write the best repro so far" in err
    assert "the repro written is partial" in err
    assert "  partial (cancelled): stopped before a fixpoint" in out
    assert "wrote m.ttr" in out and "wrote test_m.py" in out
    with Session.open(tmp_path / "m.ttr", scenario=SLOW_NEEDLE) as repro:
        assert repro.info.failure is not None
        assert repro.info.failure["signature"] == "assertion:needle.total"
    assert (tmp_path / "test_m.py").exists()


def test_max_seconds_during_minimize_writes_a_partial_repro(tmp_path: Path) -> None:
    recording = _slow_recording(tmp_path)
    process = _start(
        ["minimize", str(recording), "--scenario", TARGET, "--out", "m.ttr", "--max-seconds", "3"], tmp_path
    )
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, out + err
    assert "partial (max_seconds)" in out and "wrote m.ttr" in out
    assert (tmp_path / "m.ttr").exists()


def test_fuzz_interrupted_before_any_seed_says_only_that_it_was_interrupted(tmp_path: Path) -> None:
    # a dp_training seed of 2,000 steps takes tens of seconds: none can finish before the interrupt
    process = _start(
        ["fuzz", "dp_training", "--seeds", "0:4", "--set", "steps=2000", "--db", "f.db", "--workers", "1"],
        tmp_path,
    )
    time.sleep(4.0)
    assert process.poll() is None
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 130
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("timetravel: interrupted"), err
