"""The CLI never shows a traceback: output paths that cannot be written, numbers out of range, and
paths that are not regular files are one line and exit code 2, before any work starts."""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from timetravel.cli import main
from timetravel.recording import RecordingReader, record_run
from timetravel.scenarios import get_scenario

RUNNER = Path(__file__).with_name("hostile_runner.py")


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scenario = get_scenario("pingpong")
    path = tmp_path_factory.mktemp("cli") / "pp.ttr"
    record_run(scenario, scenario.resolve_config({"rounds": 50}), 1, path)
    return path


def one_line_error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's own errors
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2, (argv, err)
    assert err.startswith("timetravel: error: ") and err.count("\n") == 1, (argv, err)
    return err


def test_output_paths_that_cannot_be_written_are_one_line(
    tmp_path: Path, recording: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = tmp_path / "notes.ttr"
    notes.write_text("my notes")
    cases = {
        ("run", "pingpong", "--record", "/dev/full"): "/dev/full: a device, not a regular file",
        ("run", "pingpong", "--record", str(notes / "x.ttr")): "a parent of it is a file, not a folder",
        ("run", "pingpong", "--record", str(tmp_path)): f"{tmp_path}: a directory, not a regular file",
        ("export", str(recording), "--perfetto", "/dev/full"): "/dev/full: a device, not a regular file",
        ("export", str(recording), "--perfetto", str(tmp_path)): "a directory, not a regular file",
        ("minimize", str(recording), "--out", "/dev/full"): "/dev/full: a device, not a regular file",
    }
    for argv, message in cases.items():
        assert message in one_line_error(capsys, list(argv))
    assert notes.read_text() == "my notes"


def test_a_disk_that_fills_while_recording_is_one_line_and_keeps_the_frames_written(tmp_path: Path) -> None:
    """RLIMIT_FSIZE stands in for a full disk: the write past it fails with EFBIG."""
    path = tmp_path / "full.ttr"

    def limit() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (40_000, 40_000))

    argv = ["gossip", "--seed", "3", "--set", "nodes=64", "--set", "rumors=60", "--snapshot-every", "4096"]
    done = subprocess.run(
        [sys.executable, "-m", "timetravel", "run", *argv, "--record", str(path)],
        preexec_fn=limit,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parent,
    )
    assert done.returncode == 2
    assert done.stderr == (
        f"timetravel: error: {path}: File too large (the recording stops at its last complete frame)\n"
    )
    with RecordingReader.open(path) as reader:
        assert reader.truncation is not None and reader.event_batches()  # what was written opens


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["fuzz", "pingpong", "--seeds", "0:2", "--workers", "100000"],
            "--workers must be at least 1 and at most",
        ),
        (["fuzz", "pingpong", "--seeds", "0:2", "--dask", "not a url"], "is not a scheduler address"),
        (["run", "pingpong", "--seed", str(2**70)], "--seed must be in 0..18446744073709551615"),
        (["run", "gossip", "--set", f"nodes={10**26}"], "is above the maximum 999999"),
        (["run", "pingpong", "--set", f"rounds={2**70}"], "does not fit in 64 bits"),
        (
            ["run", "pingpong", "--record", "x.ttr", "--snapshot-every", str(2**70)],
            "--snapshot-every: must be in",
        ),
        (["demo-seed", "--from", str(2**70)], "--from: must be in 0..18446744073709551615"),
        (["demo-seed", "--check", "-1"], "--check: must be in 0..18446744073709551615"),
        (["inspect", "x.ttr", "--depth", "-5"], "--depth: must be in 0..64"),
    ],
)
def test_numbers_out_of_range_are_refused_before_work(
    argv: list[str],
    message: str,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    assert message in one_line_error(capsys, argv)
    assert not list(tmp_path.iterdir())  # nothing was started


def test_fuzz_record_failures_into_a_file_is_refused_before_the_sweep(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("")
    err = one_line_error(capsys, ["fuzz", "pingpong", "--seeds", "0:2", "--record-failures", "afile"])
    assert "--record-failures afile: not a folder" in err
    assert not (tmp_path / "findings.db").exists() and not list(tmp_path.glob("*.db"))


def test_paths_that_are_not_regular_files_are_refused_at_once(tmp_path: Path, recording: Path) -> None:
    """A FIFO blocks in open() and /dev/zero reads forever: every command refuses them at once (one
    subprocess runs them all, under a time limit)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    zero_link = tmp_path / "commands.tt"
    zero_link.symlink_to("/dev/zero")
    f = str(fifo)
    argvs = [
        ["inspect", f],
        ["replay", f],
        ["shell", f, "-c", "where"],
        ["tui", f, "--headless"],
        ["branch", f, "--at", "1"],
        ["fanout", f, "--at", "1"],
        ["compare", f, "main", "b1"],
        ["rerun", f],
        ["export", f, "--perfetto", str(tmp_path / "t.json")],
        ["minimize", f],
        ["findings", "--db", f],
        ["verify", "--bucket", "x", "--db", f],
        ["fuzz", "pingpong", "--seeds", "0:1", "--db", f],
        ["run", "pingpong", "--record", f],
        ["shell", str(recording), "--script", str(zero_link)],
        ["shell", str(recording), "--script", "/dev/urandom"],
        ["shell", str(recording), "--script", f],
    ]
    for result in run_in_a_limited_process(argvs, tmp_path):
        assert result["stderr"].count("\n") == 1 and "not a regular file" in result["stderr"], result


def run_in_a_limited_process(argvs: list[list[str]], cwd: Path) -> list[dict[str, Any]]:
    """Run the commands in one subprocess under 1 GiB of address space (hostile_runner.py); each
    must exit 2 within 5 s, without a traceback."""
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(1 << 30), "10", json.dumps(argvs)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=cwd,
    )
    results: list[dict[str, Any]] = json.loads(done.stdout.splitlines()[-1])
    assert len(results) == len(argvs)
    for result in results:
        assert result["traceback"] is None and result["code"] == 2, result
        assert result["seconds"] < 5, result
    return results


def test_settings_are_checked_before_anything_runs(tmp_path: Path) -> None:
    """Issue 32 item 6: a setting that is not finite, not in range or not what its key takes is one
    line naming the key, from the generic Param check, never a traceback or a failure blamed on the
    scenario; ``@FILE`` reads only a regular file under the size limit (one subprocess, 1 GiB)."""
    (tmp_path / "big.json").write_bytes(b" " * (16 * 1024 * 1024 + 1))
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    torch_script = str(Path(__file__).parent / "torch_scripts" / "known_work.py")
    deep = "[" * 10_000 + "]" * 10_000
    cases = {
        (
            "torchrun",
            "--set",
            "stuck_timeout=nan",
            torch_script,
        ): "'stuck_timeout': nan is not a finite number",
        (
            "torchrun",
            "--set",
            "stuck_timeout=inf",
            torch_script,
        ): "'stuck_timeout': inf is not a finite number",
        ("run", "dp_training", "--set", "model_flops=1e400"): "'model_flops': inf is not a finite number",
        ("run", "dp_training", "--set", "model_flops=1e300"): "one step's compute would take more than",
        ("run", "dp_training", "--set", "oversubscription=nan"): "'oversubscription': nan is not a finite",
        ("run", "pingpong", "--set", "latency=-1"): "'latency': -1000000 ns is below the minimum 0 ns",
        ("run", "gossip", "--set", "jitter=-1ms"): "'jitter': -1000000 ns is below the minimum 0 ns",
        ("run", "needle", "--set", "faults=garbage"): "'faults': faults must be 'needle', 'none' or a list",
        ("run", "needle", "--set", "faults=[1]"): "'faults': a fault record has exactly the fields",
        ("run", "needle", "--set", "faults=[NaN]"): "'faults': NaN is not a finite number",
        ("run", "needle", "--set", f"faults={deep}"): "'faults': JSON nested more than 32 deep",
        ("run", "needle", "--set", "faults=@/dev/zero"): "'faults': /dev/zero: a device, not a regular file",
        ("run", "dp_training", "--set", f"faults=@{fifo}"): f"'faults': {fifo}: a FIFO, not a regular file",
        (
            "run",
            "dp_training",
            "--set",
            "faults=@big.json",
        ): "'faults': big.json is larger than 16,777,216 bytes",
    }
    results = run_in_a_limited_process([list(argv) for argv in cases], tmp_path)
    for result, message in zip(results, cases.values(), strict=True):
        assert result["stderr"].count("\n") == 1 and message in result["stderr"], result


def test_every_output_path_gets_its_missing_folders(
    tmp_path: Path, recording: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 32 item 12, one rule for every file a command writes: missing folders on the way to it
    are created (``run --record`` and ``fuzz --db`` did, ``export`` and ``minimize --pytest`` did not)."""
    monkeypatch.chdir(tmp_path)
    failing = ["pingpong", "--seed", "3", "--set", "rtt_max=2390ns"]
    commands = [
        (["run", *failing, "--record", "a/run.ttr"], "a/run.ttr"),
        (
            [
                "fuzz",
                *failing[:1],
                *failing[3:],
                "--seeds",
                "0:4",
                "--db",
                "b/f.db",
                "--record-failures",
                "c/recs",
            ],
            "b/f.db",
        ),
        (["findings", "merge", "b/f.db", "--db", "d/merged.db"], "d/merged.db"),
        (["export", str(recording), "--perfetto", "e/trace.json"], "e/trace.json"),
        (["minimize", "a/run.ttr", "--out", "f/min.ttr", "--pytest", "g/test_min.py"], "g/test_min.py"),
    ]
    for argv, made in commands:
        code = main(argv)
        assert code in (0, 1), (argv, capsys.readouterr().err)
        assert (tmp_path / made).is_file(), argv
    assert list((tmp_path / "c" / "recs").glob("pingpong-*.ttr")) and (tmp_path / "f" / "min.ttr").is_file()
