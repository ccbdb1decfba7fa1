"""Minimizing a recorded failure: the same signature, a repro recording that replays bit for bit, a
start before the kept faults (checked: from there the run passes without them), and a pytest file
that is red while the bug is there and green once it is fixed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from branch_writing import append_branch, world_at

from timetravel.bench.minimize import planted_ids
from timetravel.cli import main as cli_main
from timetravel.explore import Session
from timetravel.explore.commands import CommandContext, CommandError, render_text, run_line
from timetravel.explore.minimize_branch import pending_fault_ids
from timetravel.explore.minimize_run import CHECK_NO_FAULT, CHECK_PASSED, minimize_run
from timetravel.explore.minimize_trials import Budget, NothingToMinimize
from timetravel.explore.verify_replay import replay_session
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.sim import Context, Event, Param, Scenario, World

NEEDLE = get_scenario("needle")
REPOSITORY = Path(__file__).resolve().parent.parent
JSON_KEYS = {
    "stopped_by",
    "partial",
    "start_events",
    "start_check",
    "signature",
    "faults_before",
    "faults_after",
    "faults_kept",
    "choices_before",
    "choices_after",
    "runs",
    "seconds",
    "out",
    "pytest",
    "same_failure",
    "input_bytes",
    "out_bytes",
    # each shrinkable size of the scenario, before and after (needle's; a torch run's nproc)
    "workers_before",
    "workers_after",
    "rounds_before",
    "rounds_after",
}


@pytest.fixture(scope="module")
def needle_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("needle") / "needle.ttr"
    report, _ = record_run(NEEDLE, NEEDLE.resolve_config({}), 0, path)
    assert report["failure"]["signature"] == "assertion:needle.total"
    return path, report


def run_pytest(path: Path) -> subprocess.CompletedProcess[str]:
    environment = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(path)],
        capture_output=True,
        text=True,
        env=environment,
        cwd=path.parent,
        timeout=120,
    )


def test_a_recorded_failure_shrinks_to_the_planted_pair_and_a_repro_that_replays(
    needle_recording: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, report = needle_recording
    out, test_file = tmp_path / "repro" / "needle-min.ttr", tmp_path / "repro" / "test_needle_min.py"
    out.parent.mkdir()
    with Session.open(path) as session:
        result = minimize_run(session, out=out, pytest=test_file)
    assert result.to_data().keys() == JSON_KEYS
    assert result.signature == report["failure"]["signature"]
    assert sorted(result.faults_kept) == sorted(planted_ids(0, NEEDLE.resolve_config({})))
    assert (result.faults_before, result.faults_after, result.choices_after) == (102, 2, 0)
    assert (result.out, result.pytest) == (str(out), str(test_file))
    # the repro recording: a normal .ttr of the minimized run, verified bit for bit
    with Session.open(out) as repro:
        assert repro.info.config["workers"] == result.config["workers"] < report["config"]["workers"]
        assert repro.info.failure is not None and repro.info.failure["signature"] == result.signature
        assert repro.end.events == result.events
        assert replay_session(repro).verified
        positions = {snapshot.events: index for index, snapshot in enumerate(repro.snapshots())}
        start_world = repro.snapshot_world(positions[result.start_events])
        later = [s.events for s in repro.snapshots() if s.events > result.start_events and not s.final]
        next_world = repro.snapshot_world(positions[later[0]]) if later else None
    # the start: the latest snapshot before the first kept fault started (both still pending there)
    assert 0 < result.start_events < result.events
    assert set(result.faults_kept) <= set(pending_fault_ids(start_world))
    assert next_world is None or not set(result.faults_kept) <= set(pending_fault_ids(next_world))
    assert result.start_check == CHECK_PASSED  # from there, without the kept faults, the run passes
    assert result.passes["snapshot"] == {"runs": 2, "accepted": 1}
    assert result.runs == sum(counts["runs"] for counts in result.passes.values())
    # the pytest file replays it from there: red while the bug is there, naming the signature
    source = test_file.read_text()
    assert "RECORDING = Path(__file__).parent / 'needle-min.ttr'" in source
    assert f"START_EVENTS = {result.start_events}" in source
    assert f"; {result.runs} runs." in source  # the start search's runs included
    completed = run_pytest(test_file)
    assert completed.returncode == 1 and "1 failed" in completed.stdout, completed.stdout
    assert "fails with assertion:needle.total (recorded: assertion:needle.total)" in completed.stdout


FIX = """        world = session.snapshot_world(position)
        world.config["bug"] = "none"  # the fix (needle's planted bug switched off in the restored world)
"""


def test_the_generated_test_is_red_with_the_bug_and_green_once_it_is_fixed(
    needle_recording: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """The fix stands in for a code change: the restart keeps the worker's memory from the start on.
    From a snapshot taken after the restart had already wiped that memory, the fixed run would still
    fail (the damage is in the state): the start must come before the kept faults."""
    path, _ = needle_recording
    test_file = tmp_path / "test_repro.py"
    with Session.open(path) as session:
        result = minimize_run(session, pytest=test_file)
    assert result.out == str(tmp_path / "test_repro.ttr")  # next to the test, named after it
    red = run_pytest(test_file)
    assert red.returncode == 1 and "assertion:needle.total" in red.stdout, red.stdout
    source = test_file.read_text()
    assert source.count("        world = session.snapshot_world(position)\n") == 1
    test_file.write_text(source.replace("        world = session.snapshot_world(position)\n", FIX))
    green = run_pytest(test_file)
    assert green.returncode == 0 and "1 passed" in green.stdout, green.stdout + green.stderr


def test_a_spent_budget_still_writes_the_best_repro_so_far_and_says_it_is_partial(
    needle_recording: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, _ = needle_recording
    with Session.open(path) as session:
        result = minimize_run(session, out=tmp_path / "small.ttr", budget=Budget(max_runs=15))
    assert result.stopped_by == "max_runs" and result.partial and result.to_data()["partial"] is True
    assert result.faults_after < result.faults_before  # some progress, kept
    assert result.start_check == CHECK_PASSED  # the start is searched and checked all the same
    assert any(
        line.startswith("  partial (max_runs): stopped before a fixpoint") for line in render_text(result)
    )
    with Session.open(tmp_path / "small.ttr") as repro:
        assert repro.info.failure is not None and repro.info.failure["signature"] == result.signature
        assert replay_session(repro).verified


# -- a run that depends on state outside the world: no snapshot reproduces it ----------------------

_OUTSIDE = {"count": 0}
"""State a handler keeps outside the world: a snapshot cannot capture it (the bug this pass finds)."""
EVENTS = 400


def _build(config: dict[str, Any], seed: int) -> World:
    _OUTSIDE["count"] = 0
    world = World("outside", config, seed)
    world.add_node("a", "ticker", {"ticks": 0})
    world.schedule(0, "a", "tick")
    return world


def _tick(state: dict[str, Any], event: Event, ctx: Context) -> None:
    state["ticks"] += 1
    _OUTSIDE["count"] += 1
    if _OUTSIDE["count"] == EVENTS and state["ticks"] == EVENTS:
        ctx.fail("assertion", "reached the count", site="outside.count")
        return
    ctx.timer(1_000, "tick")


OUTSIDE = Scenario(
    name="outside",
    summary="keeps a counter outside the world",
    params=(Param("unused", "int", 0, "nothing"),),
    build=_build,
    handlers={"ticker": {"tick": _tick}},
    determinism="off",
)


def test_a_failure_that_needs_no_fault_starts_its_repro_at_the_beginning(tmp_path: Path) -> None:
    path = tmp_path / "outside.ttr"
    report, _ = record_run(OUTSIDE, OUTSIDE.resolve_config({}), 0, path, snapshot_every_events=64)
    assert report["failure"]["signature"] == "assertion:outside.count"
    with Session.open(path, scenario=OUTSIDE) as session:
        result = minimize_run(session, out=tmp_path / "repro.ttr")
    assert result.faults_kept == () and result.start_events == 0
    assert result.start_check == CHECK_NO_FAULT
    assert result.passes["snapshot"] == {"runs": 0, "accepted": 0}


# -- refusals, the command and the CLI --------------------------------------------------------------


def test_a_passing_recording_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "pass.ttr"
    record_run(NEEDLE, NEEDLE.resolve_config({"bug": "none"}), 0, path)
    with Session.open(path) as session, pytest.raises(NothingToMinimize, match="did not fail"):
        minimize_run(session)
    with Session.open(path) as session:
        context = CommandContext(session=session)
        with pytest.raises(CommandError, match="did not fail"):
            run_line("minimize", context)
        with pytest.raises(CommandError, match="no branch 'b1'"):
            run_line("minimize --branch b1", context)


FORK = 100


@pytest.fixture(scope="module")
def needle_branch(
    needle_recording: tuple[Path, dict[str, Any]], tmp_path_factory: pytest.TempPathFactory
) -> Path:
    """needle seed 0 with a branch b1 from event #100 with a new branch key (new jitter): it
    still fails the same way, because the planted pair is still ahead in its schedule."""
    source, _ = needle_recording
    path = tmp_path_factory.mktemp("branch") / "needle-b1.ttr"
    shutil.copy(source, path)
    world = world_at(path, FORK)
    world.branch_key = 1
    end = append_branch(path, NEEDLE, world, FORK, snapshot_every_events=64)
    assert end["failure"]["signature"] == "assertion:needle.total"
    return path


def test_a_branch_is_minimized_from_its_fork_into_a_new_branch_of_the_repro(
    needle_branch: Path, tmp_path: Path
) -> None:
    out, test_file = tmp_path / "b1-repro.ttr", tmp_path / "test_b1_repro.py"
    with Session.open(needle_branch, branch="b1") as branch:
        pending = [
            record["id"]
            for record in branch.snapshot_world(1).faults
            if record["t_start"] > branch.snapshot_world(1).t_ns
        ]
        result = minimize_run(branch, out=out, pytest=test_file)
    planted = sorted(planted_ids(0, NEEDLE.resolve_config({})))
    assert sorted(result.faults_kept) == planted and set(planted) <= set(pending)
    assert result.faults_before == len(pending) and result.faults_after == 2
    assert result.choices_after == 0 and result.repro_branch == "b1-min"
    assert "size" not in result.passes and "fault_params" not in result.passes  # fixed by the snapshot
    with Session.open(out, branch="b1-min") as repro:
        assert repro.fork_events == FORK
        assert repro.info.failure is not None and repro.info.failure["signature"] == result.signature
        assert replay_session(repro).verified
        assert FORK < result.start_events < repro.end.events
    assert result.start_check == CHECK_PASSED
    with Session.open(out, branch="b1") as original:  # the recording's own branches are all there
        assert original.info.failure is not None
    completed = run_pytest(test_file)
    assert completed.returncode == 1 and "assertion:needle.total" in completed.stdout, completed.stdout
    assert "BRANCH = 'b1-min'" in test_file.read_text()


def test_the_minimize_command_renders_and_writes(
    needle_recording: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, _ = needle_recording
    with Session.open(path) as session:
        context = CommandContext(session=session)
        result = run_line(f"minimize --out {tmp_path / 'm.ttr'} --max-runs 500", context)
    lines = render_text(result)
    assert lines[0].startswith(f"minimized assertion:needle.total in {result.runs} runs")
    assert any(line.startswith("  faults  102 -> 2: ") for line in lines)
    assert (
        f"  the repro fails after {result.events} events; its test starts at event #{result.start_events} "
        in "\n".join(lines)
    )


def test_the_cli_prints_the_issue_s_json_object_and_refuses_bad_input(
    needle_recording: tuple[Path, dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path, _ = needle_recording
    out = tmp_path / "cli.ttr"
    assert cli_main(["minimize", str(path), "--out", str(out), "--max-runs", "300", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed.keys() == JSON_KEYS and printed["out"] == str(out) and printed["pytest"] is None
    assert printed["faults_after"] == 2 and printed["runs"] <= 300
    assert cli_main(["minimize", str(path), "--max-runs", "0"]) == 2
    assert "--max-runs must be at least 1" in capsys.readouterr().err
    assert cli_main(["minimize", str(path), "--branch", "b2"]) == 2
    assert "no branch 'b2' (branches: main)" in capsys.readouterr().err
    assert cli_main(["minimize", str(tmp_path / "missing.ttr")]) == 2


def test_a_missing_wait_race_on_16_ranks_shrinks_to_one_rank(tmp_path: Path) -> None:
    """The issue's race_repro: the missing wait is a race between two streams of one GPU, so a
    minimal reproduction needs one rank (at most 4 is the target) and one step."""
    scenario = get_scenario("dp_training")
    path = tmp_path / "race.ttr"
    report, _ = record_run(scenario, scenario.resolve_config({"bug": "missing_wait"}), 0, path)
    assert report["failure"]["signature"] == "race:gpu.race.grad" and report["config"]["ranks"] == 16
    with Session.open(path) as session:
        result = minimize_run(session, out=tmp_path / "race-min.ttr", pytest=tmp_path / "test_race.py")
    assert result.signature == "race:gpu.race.grad"
    assert (result.config["ranks"], result.config["steps"]) == (1, 1)
    assert result.params_changed == {"ranks": (16, 1), "steps": (100, 1)}
    assert result.start_events == 0 and result.start_check == CHECK_NO_FAULT
    test_file = tmp_path / "test_race.py"
    red = run_pytest(test_file)
    assert red.returncode == 1 and "fails with race:gpu.race.grad" in red.stdout, red.stdout
    fixed = "        world.config['bug'] = 'none'  # the fix: the optimizer waits for the gradient\n"
    source = test_file.read_text().replace(
        "        world = session.snapshot_world(position)\n",
        "        world = session.snapshot_world(position)\n" + fixed,
    )
    test_file.write_text(source)
    green = run_pytest(test_file)
    assert green.returncode == 0, green.stdout + green.stderr
