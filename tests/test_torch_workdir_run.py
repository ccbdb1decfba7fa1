"""Runs of real torch scripts in their private working directory (issue 14: files belong to the branch)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from torch_launch import simulate_world
from torch_recordings import timetravel_process

from timetravel.scenarios import get_scenario
from timetravel.torch.world.specs import launch_naming
from timetravel.torch.world.workdir import source_digest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "tests" / "torch_scripts"
RESUME = SCRIPTS / "resume_latest.py"
COLLECTIVES_PER_STEP = 2  # the gradient's all_reduce and a barrier


def a_checkpoint_at_step(folder: Path, step: int) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    torch.save({"step": step, "weight": torch.ones(3)}, folder / "latest.pt")
    return folder / "latest.pt"


def test_a_script_that_resumes_from_latest_pt_never_reads_an_earlier_run_s_file(tmp_path: Path) -> None:
    first, _ = simulate_world(RESUME, 2, 5, "args=4")
    second, _ = simulate_world(RESUME, 2, 5, "args=4")
    assert first["outcome"] == second["outcome"] == "pass", (first["failure"], second["failure"])
    assert first["summary"]["collectives"] == second["summary"]["collectives"] == 4 * COLLECTIVES_PER_STEP
    assert first["hash_chain"] == second["hash_chain"] and first["state_hash"] == second["state_hash"]
    assert not (ROOT / "latest.pt").exists() and not Path("latest.pt").exists()


def test_workdir_copies_a_directory_in_and_the_run_never_writes_back(tmp_path: Path) -> None:
    checkpoint = a_checkpoint_at_step(tmp_path / "resume_from", 3)
    before = checkpoint.read_bytes()
    resumed, world = simulate_world(RESUME, 2, 5, "args=4", f"workdir={checkpoint.parent}")
    assert resumed["outcome"] == "pass", resumed["failure"]
    assert resumed["summary"]["collectives"] == 1 * COLLECTIVES_PER_STEP  # it started at step 3 of 4
    assert checkpoint.read_bytes() == before
    assert sorted(os.listdir(checkpoint.parent)) == ["latest.pt"]  # the logs stayed in the private copy
    assert world.nodes["c10d"]["workdir_sha256"] == source_digest(str(checkpoint.parent))
    fresh, fresh_world = simulate_world(RESUME, 2, 5, "args=4")
    assert fresh["summary"]["collectives"] == 4 * COLLECTIVES_PER_STEP
    assert fresh_world.nodes["c10d"]["workdir_sha256"] != world.nodes["c10d"]["workdir_sha256"]
    assert fresh["state_hash"] != resumed["state_hash"]


@pytest.mark.slow
def test_torchrun_in_a_directory_holding_latest_pt_does_not_see_it_unless_workdir_names_it(
    tmp_path: Path,
) -> None:
    a_checkpoint_at_step(tmp_path, 3)
    environment = {**os.environ, "PYTHONPATH": str(ROOT)}
    outcomes = []
    for extra in ([], ["--workdir", "."]):
        arguments = ["torchrun", *extra, "--nproc-per-node", "2", "--json", str(RESUME), "4"]
        finished = timetravel_process(arguments, cwd=tmp_path, env=environment, timeout_s=300)
        assert finished.returncode == 0, finished.stderr[-2000:]
        outcomes.append(json.loads(finished.stdout))
        assert "rank 0 starts at step " + ("3" if extra else "0") in finished.stderr
    assert [outcome["summary"]["collectives"] for outcome in outcomes] == [8, 2]
    assert sorted(os.listdir(tmp_path)) == ["latest.pt"]


def test_the_ranks_are_told_where_the_user_launched_from(tmp_path: Path) -> None:
    report, _ = simulate_world(SCRIPTS / "working_directory.py", 2, 0, f"args={os.getcwd()}")
    assert report["outcome"] == "pass", report["failure"]


def test_a_missing_relative_path_names_the_private_working_directory() -> None:
    report, _ = simulate_world(SCRIPTS / "reads_relative.py", 2, 0)
    assert report["failure"]["kind"] == "exception"
    assert "FileNotFoundError" in report["failure"]["message"]
    assert "(ranks run in a private working directory: pass --workdir DIR" in report["failure"]["message"]
    saved, _ = simulate_world(SCRIPTS / "write_outside.py", 2, 0, "args=../shared")  # torch.save's own error
    assert "Parent directory ../shared does not exist. (ranks run in a private" in saved["failure"]["message"]


def test_a_checkpoint_saved_outside_the_working_directory_is_a_warning_naming_it(tmp_path: Path) -> None:
    report, world = simulate_world(SCRIPTS / "write_outside.py", 2, 0, f"args={tmp_path}")
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["warnings"] == ["write_outside_workdir"]
    warning = world.nodes["c10d"]["warnings"]["write_outside_workdir"]
    assert warning["first_rank"] == "r0"
    assert warning["detail"] == os.path.realpath(tmp_path / "model.pt")  # torch.save, through C++
    assert report["summary"]["first_write_outside_workdir"] == warning["detail"]
    assert sorted(os.listdir(tmp_path)) == ["model.pt", "train.log"]


READS_BACK = SCRIPTS / "reads_back_its_file.py"
RESULT_FLIP_AT_NS = 400_000
"""r1's first all_reduce result after this time gets one bit flipped (step 2 of 6): from there the
two branches' ranks write different text to the same file name."""


def test_two_executions_resumed_from_one_checkpoint_each_read_back_their_own_files(tmp_path: Path) -> None:
    from timetravel.explore import Session
    from timetravel.explore.branching import branch
    from timetravel.explore.stepper import stepper_at
    from timetravel.explore.tracks import open_track
    from timetravel.recording import record_run

    launch = launch_naming([str(READS_BACK)])
    scenario = get_scenario("torch")
    flip = {"kind": "corrupt", "target": "r1", "t_start": RESULT_FLIP_AT_NS, "params": {"side": "result"}}
    config = scenario.resolve_config(
        [
            f"script={READS_BACK}",
            "nproc=2",
            "args=6",
            "rank_output=quiet",
            "detect_divergence=off",  # the flipped result must reach r1's file, not stop the run
            f"faults={json.dumps([flip])}",
        ]
    )
    path = tmp_path / "files.ttr"
    recorded, _ = record_run(scenario, config, 5, path, snapshot_every_events=64, force=True, launch=launch)
    assert recorded["outcome"] == "pass", recorded["failure"]
    with Session.open(path, launch=launch) as session:
        # two futures from one moment, both resumed from the checkpoint kept there: one without the
        # flip, one with it (a new branch key changes nothing else), so their ranks write different text
        fixed = branch(session, RESULT_FLIP_AT_NS - 1, {"drop_faults": ["f1"]})
        flipped = branch(session, RESULT_FLIP_AT_NS - 1, {"branch_key": 1})
        assert fixed.outcome == flipped.outcome == "pass", (fixed.failure, flipped.failure)
        side_a, side_b = open_track(session, fixed.name), open_track(session, flipped.name)
        assert side_a.fork_events == side_b.fork_events
        # the two sides of a divergence search, run side by side (every event checked against each
        # branch's recording: a rank that read the other side's file raises, and its events differ);
        # with values wanted the re-executions run the ranks (else they read the recording's journal)
        with side_a.source.with_values():
            stepper_a, stepper_b = (
                stepper_at(side_a, side_a.fork_events),
                stepper_at(side_b, side_b.fork_events),
            )
            directories = set()
            while not (stepper_a.at_end() and stepper_b.at_end()):
                stepper_a.advance(1)
                stepper_b.advance(1)
                for side, world in ((side_a, stepper_a.world), (side_b, stepper_b.world)):
                    live = side.source.host.driver_for(world)
                    if live is not None:
                        directories.add(live.workdir.path)
            stepper_a.finish()
            stepper_b.finish()
        assert not stepper_a.world.failures and not stepper_b.world.failures
        assert len(directories) == 2  # one private directory per live execution
