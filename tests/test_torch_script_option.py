"""A torch recording re-executes only the script the user names with ``--script`` (issue 14).

The stored state opens for inspection with nothing named; every command that re-executes (a whole
replay, a seek between snapshots, a branch, a fan-out, ...) refuses in one line saying what to pass
and runs nothing; a script whose sha256 is not the recorded one is refused too ("the script
changed"), except by ``rerun``, which is about today's code and says so. A recording that names a
script or a function target never makes timetravel run it on its own: the scripts here touch a
marker file when they run, and the tests check that it stays absent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)
from torch_recordings import DDP_MLP, TIMETRAVEL, record_torchrun

from timetravel.cli import COMMANDS, build_parser
from timetravel.cli.recording_common import ALWAYS_EXECUTES

MARKER_ENV = "TIMETRAVEL_TEST_RAN_MARKER"
MARKER_PROLOGUE = (
    "import os as _os, pathlib as _pathlib\n"
    f"if _os.environ.get({MARKER_ENV!r}):\n"
    f"    _os.utime(_os.environ[{MARKER_ENV!r}])\n"
)
"""The script marks that it ran by setting the marker's mtime to now: a utime is not a write, so
the rank environment's outside-the-working-directory report (a World event) stays out of it and
a re-execution keeps the recorded events."""
BETWEEN_SNAPSHOTS = "0.5ms"
"""A time after #0 and before the end snapshot of the 2-step run: seeking there re-executes."""

OPENS_RECORDINGS = {
    "branch",
    "branches",
    "compare",
    "diff",
    "explain",
    "export",
    "fanout",
    "faults",
    "inspect",
    "likelihood",
    "minimize",
    "origin",
    "replay",
    "rerun",
    "shell",
    "tui",
}
NO_RECORDING = {
    "scenarios",
    "run",
    "torchrun",
    "python",
    "bench",
    "check-determinism",
    "fuzz",
    "findings",
    "verify",
    "demo-seed",
}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A 2-rank, 2-step recording of a copy of ddp_mlp.py that touches a marker when it runs."""
    folder = tmp_path_factory.mktemp("torch_script_option")
    script = folder / "train.py"
    script.write_text(MARKER_PROLOGUE + DDP_MLP.read_text())
    recording = folder / "run.ttr"
    done = record_torchrun(recording, script, cwd=folder, env=_env())
    assert done.returncode == 0, done.stderr
    elsewhere = folder / "another_machine"
    elsewhere.mkdir()
    copy = elsewhere / "train.py"
    shutil.copy(script, copy)
    changed = elsewhere / "train_changed.py"
    changed.write_text(script.read_text() + "# a change after the recording\n")
    return {"recording": recording, "script": script, "copy": copy, "changed": changed, "folder": folder}


def _env(**extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != MARKER_ENV}
    env.update(extra)
    return env


def _run(
    recorded: dict[str, Path], *argv: str, marker: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = _env(**({MARKER_ENV: str(_unmarked(marker))} if marker is not None else {}))
    done = subprocess.run(
        [*TIMETRAVEL, *argv], capture_output=True, text=True, timeout=300, cwd=recorded["folder"], env=env
    )
    assert "Traceback" not in done.stderr, done.stderr
    return done


def _unmarked(marker: Path) -> Path:
    marker.touch()
    os.utime(marker, (0, 0))
    return marker


def _ran(marker: Path) -> bool:
    return marker.stat().st_mtime > 0


def _one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("timetravel: error: "), lines
    return lines[0]


def _executing_command_lines(recording: str) -> list[list[str]]:
    """One command line per way of re-executing a recording (each needs the script)."""
    return [
        ["replay", recording],
        ["rerun", recording],
        ["fanout", recording, "--at", "0", "--samples", "1"],
        ["likelihood", recording, "--samples", "1"],
        ["branch", recording, "--at", BETWEEN_SNAPSHOTS, "--set", "reduce_order=arrival"],
        ["minimize", recording],
    ]


def _seeking_command_lines(recording: str) -> list[list[str]]:
    """One command line per way of seeking into a recording: the recorded events re-execute from the
    recording's journal (torch/world/journal.py), with no rank process and no script."""
    return [
        ["inspect", recording, "--at", BETWEEN_SNAPSHOTS],
        ["shell", recording, "-c", f"goto {BETWEEN_SNAPSHOTS}"],
        ["tui", recording, "--at", BETWEEN_SNAPSHOTS, "--headless"],
        ["export", recording, "--perfetto", "trace.json"],
    ]


def test_the_stored_state_opens_for_inspection_without_a_script(
    recorded: dict[str, Path], tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    done = _run(
        recorded, "inspect", str(recorded["recording"]), "--path", "nodes/c10d/completed", marker=marker
    )
    assert done.returncode == 0, done.stderr
    assert "nodes/c10d/completed" in done.stdout
    listed = _run(recorded, "branches", str(recorded["recording"]), marker=marker)
    assert listed.returncode == 0, listed.stderr
    assert not _ran(marker)


@pytest.mark.parametrize("index", range(len(_executing_command_lines(""))))
def test_every_re_execution_without_script_runs_nothing_and_names_the_option(
    recorded: dict[str, Path], tmp_path: Path, index: int
) -> None:
    marker = tmp_path / "ran"
    argv = _executing_command_lines(str(recorded["recording"]))[index]
    line = _one_line_error(_run(recorded, *argv, marker=marker))
    assert "this is a recording of a torch script: pass --script PATH" in line
    assert "sha256 " in line
    assert not _ran(marker), f"{argv[0]} ran the recorded script without --script"


@pytest.mark.parametrize("index", range(len(_seeking_command_lines(""))))
def test_every_seek_without_script_replays_the_journal_and_runs_nothing(
    recorded: dict[str, Path], tmp_path: Path, index: int
) -> None:
    marker = tmp_path / "ran"
    argv = _seeking_command_lines(str(recorded["recording"]))[index]
    done = _run(recorded, *argv, marker=marker)
    assert done.returncode == 0, (argv, done.stderr)
    assert not _ran(marker), f"{argv[0]} ran the recorded script"


def test_explain_without_script_answers_from_the_stored_recording_and_runs_nothing(
    recorded: dict[str, Path], tmp_path: Path
) -> None:
    marker = tmp_path / "ran"
    done = _run(recorded, "explain", str(recorded["recording"]), "--json", marker=marker)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["failure"] is None  # the 2-step run passed: nothing to explain
    assert not _ran(marker)


def test_replay_with_the_script_named_verifies_bit_for_bit(recorded: dict[str, Path]) -> None:
    # the copy stands for the script on another machine: the recorded path is not what runs
    done = _run(recorded, "replay", str(recorded["recording"]), "--script", str(recorded["copy"]), "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # --json stays one JSON object on stdout
    assert report["verified"] is True
    assert report["outcome"] == "pass"


def test_a_seek_between_snapshots_with_the_script_named_still_replays_the_journal(
    recorded: dict[str, Path], tmp_path: Path
) -> None:
    # the script runs only where values are wanted that the recording does not hold
    # (test_torch_journal.py); a seek reads the journal, the same answer without a process
    marker = tmp_path / "ran"
    done = _run(
        recorded,
        "shell",
        str(recorded["recording"]),
        "--script",
        str(recorded["copy"]),
        "-c",
        f"goto {BETWEEN_SNAPSHOTS}; print nodes/c10d/completed",
        marker=marker,
    )
    assert done.returncode == 0, done.stderr
    assert f"main {BETWEEN_SNAPSHOTS}" in done.stdout
    assert not _ran(marker)
    unnamed = _run(
        recorded,
        "shell",
        str(recorded["recording"]),
        "-c",
        f"goto {BETWEEN_SNAPSHOTS}; print nodes/c10d/completed",
    )
    assert unnamed.returncode == 0 and unnamed.stdout == done.stdout


def test_a_changed_script_is_refused_in_one_line(recorded: dict[str, Path], tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    argv = ["replay", str(recorded["recording"]), "--script", str(recorded["changed"])]
    line = _one_line_error(_run(recorded, *argv, marker=marker))
    assert "the script changed since the recording" in line
    assert "--allow-changed-script" in line
    assert not _ran(marker)


def test_allow_changed_script_runs_it_and_the_replay_names_the_code_change(recorded: dict[str, Path]) -> None:
    argv = [
        "replay",
        str(recorded["recording"]),
        "--script",
        str(recorded["changed"]),
        "--allow-changed-script",
    ]
    done = _run(recorded, *argv, "--json")
    assert done.returncode == 1, done.stderr  # a mismatch, not bad input: the initial world differs
    assert json.loads(done.stdout)["cause"] == "code_changed"
    assert "the script changed since the recording" in done.stderr


def test_rerun_runs_a_changed_script_and_says_so(recorded: dict[str, Path], tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    argv = ["rerun", str(recorded["recording"]), "--script", str(recorded["changed"])]
    done = _run(recorded, *argv, marker=marker)
    assert done.returncode == 0, done.stderr
    assert "today:" in done.stdout
    assert "the script changed since the recording" in done.stderr
    assert _ran(marker)


def test_script_must_be_a_python_file(recorded: dict[str, Path], tmp_path: Path) -> None:
    text_file = tmp_path / "train.txt"
    text_file.write_text("print('no')\n")
    line = _one_line_error(_run(recorded, "replay", str(recorded["recording"]), "--script", str(text_file)))
    assert "is not a Python file (.py)" in line
    line = _one_line_error(
        _run(recorded, "replay", str(recorded["recording"]), "--script", str(tmp_path / "absent.py"))
    )
    assert "is not a file" in line


def test_without_torch_the_state_opens_and_execution_says_why_not(
    recorded: dict[str, Path], tmp_path: Path
) -> None:
    hide = tmp_path / "no_torch"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text('import sys\nsys.modules["torch"] = None  # as if not installed\n')
    env = _env(PYTHONPATH=str(hide))

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [*TIMETRAVEL, *argv], capture_output=True, text=True, timeout=300, cwd=recorded["folder"], env=env
        )
        assert "Traceback" not in done.stderr, done.stderr
        return done

    recording = str(recorded["recording"])
    inspected = run("inspect", recording, "--path", "nodes/c10d/completed", "--script", str(recorded["copy"]))
    assert inspected.returncode == 0, inspected.stderr
    between = run("inspect", recording, "--at", BETWEEN_SNAPSHOTS)  # the journal: no rank, no torch
    assert between.returncode == 0, between.stderr
    line = _one_line_error(run("replay", recording, "--script", str(recorded["copy"])))
    assert "torch is not installed on this machine" in line
    script = str(recorded["copy"])
    for argv in (["torchrun", script], ["run", "torch", "--set", f"script={script}"]):
        line = _one_line_error(run(*argv))  # before a rank zygote that fails with a traceback
        assert "torch is not installed on this machine" in line


FORGED_FUNCTION = """
import os
import pathlib

import torch
import torch.distributed as dist


def train():
    if os.environ.get("{marker_env}"):
        os.utime(os.environ["{marker_env}"])
    dist.init_process_group("gloo")
    for _ in range(3):
        value = torch.ones(1)
        dist.all_reduce(value)
    dist.destroy_process_group()
"""


def test_a_recording_of_a_function_target_never_runs_it_from_the_command_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from timetravel.recording import record_run
    from timetravel.scenarios import get_scenario
    from timetravel.torch.world.specs import launch_naming_function

    module = tmp_path / "tt_forged_target.py"
    module.write_text(FORGED_FUNCTION.format(marker_env=MARKER_ENV))
    monkeypatch.syspath_prepend(str(tmp_path))
    launch = launch_naming_function("tt_forged_target:train")
    scenario = get_scenario("torch")
    config = scenario.resolve_config(
        {"function": "tt_forged_target:train", "nproc": 2, "rank_output": "quiet"}
    )
    recording = tmp_path / "function.ttr"
    report, _world = record_run(scenario, config, 0, recording, launch=launch)
    assert report["outcome"] == "pass", report["failure"]
    marker = tmp_path / "ran"
    # the module is importable by the command line's processes: only the opt-in is missing
    env = _env(PYTHONPATH=str(tmp_path), **{MARKER_ENV: str(_unmarked(marker))})
    for argv in (
        ["replay", str(recording)],
        ["replay", str(recording), "--script", str(DDP_MLP)],
        ["fanout", str(recording), "--at", "0", "--samples", "1"],
    ):
        done = subprocess.run(
            [*TIMETRAVEL, *argv], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
        )
        assert "Traceback" not in done.stderr, done.stderr
        line = _one_line_error(done)
        assert "tt_forged_target:train" in line, line
        assert not _ran(marker), f"{argv} ran the recorded function"
    for argv in (["inspect", str(recording), "--at", "1us"], ["shell", str(recording), "-c", "goto 1us"]):
        done = subprocess.run(  # a seek reads the journal: the function never runs
            [*TIMETRAVEL, *argv], capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env
        )
        assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
        assert not _ran(marker), f"{argv} ran the recorded function"


def _subparsers() -> dict[str, Any]:
    parser = build_parser(None)
    action = next(action for action in parser._actions if action.dest == "command")
    return dict(action.choices)  # type: ignore[arg-type]


def test_every_command_is_classified_as_opening_a_recording_or_not() -> None:
    # a new command must say here whether it opens a recording (and so takes --script)
    names = {entry.name for entry in COMMANDS}
    assert names == OPENS_RECORDINGS | NO_RECORDING
    assert ALWAYS_EXECUTES <= OPENS_RECORDINGS


@pytest.mark.parametrize("name", sorted(OPENS_RECORDINGS))
def test_every_command_that_opens_a_recording_takes_script(name: str) -> None:
    options = _subparsers()[name]._option_string_actions
    assert options["--script"].dest == "torch_script"
    assert options["--allow-changed-script"].dest == "allow_changed_script"


def test_shell_still_reads_a_commands_file_given_as_script(recorded: dict[str, Path], tmp_path: Path) -> None:
    # --script FILE was the shell's file of commands before it named the torch script: a FILE that is
    # not a .py file is still read as commands, the same as -x FILE
    commands = tmp_path / "repro.tt"
    commands.write_text("where\n")
    done = _run(recorded, "shell", str(recorded["recording"]), "--script", str(commands))
    assert done.returncode == 0, done.stderr
    assert "where" in done.stdout
    by_x = _run(recorded, "shell", str(recorded["recording"]), "-x", str(commands))
    assert by_x.returncode == 0, by_x.stderr
    assert by_x.stdout == done.stdout


def _refusing_build(config: dict[str, Any], seed: int) -> Any:
    from timetravel.sim import World

    world = World("refuses", config, seed)
    world.add_node("a", "starter", {"n": 0})
    world.schedule(0, "a", "go")
    return world


def _refusing_go(state: dict[str, Any], event: Any, ctx: Any) -> None:
    from timetravel.sim.scenario import NotAuthorizedError

    raise NotAuthorizedError("this would run code nobody named")


def test_a_handler_refusing_to_run_unnamed_code_is_an_error_not_the_run_s_failure() -> None:
    # a rank starts inside a handler (a seek or branch resumes without build): the refusal must reach
    # the command line as bad input, not be recorded as the run's "exception" failure
    from timetravel.sim import Scenario
    from timetravel.sim.runner import run_report
    from timetravel.sim.scenario import NotAuthorizedError

    scenario = Scenario(
        name="refuses",
        summary="a handler that refuses to start code",
        params=(),
        build=_refusing_build,
        handlers={"starter": {"go": _refusing_go}},
    )
    with pytest.raises(NotAuthorizedError, match="nobody named"):
        run_report(scenario, scenario.resolve_config([]), 0)
