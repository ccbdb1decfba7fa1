"""``minimize`` shrinks the job, not only the faults (issue 31, part 5).

tests/torch_scripts/nan_two_ranks.py feeds a NaN from ranks 0 and 1 into DDP's gradient all_reduce at
one step, whatever the world size. Recorded on 4 ranks, minimize must give 2 (never fewer than the
ranks the failure involves), the same step and tensor, a repro no larger than the input, within its
budget; its trials stop once they run past the failure's step; a candidate failing at another step
is another bug.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from torch_launch import TEST_SCRIPTS

from timetravel.explore import Session
from timetravel.explore.minimize import Minimizer
from timetravel.explore.minimize_run import minimize_run
from timetravel.explore.minimize_trials import Budget, Candidate, Trial, run_candidate
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.torch.world.minimizing import past_failure, size_floor

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "torch_scripts" / "nan_two_ranks.py"
NAN_STEP_INDEX = 3
"""The script's 0-based step at which ranks 0 and 1 put a NaN in their batch (its default)."""
BUDGET_S = 300


@pytest.fixture(scope="module")
def four_ranks(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("minimize_job") / "nan4.ttr"
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={SCRIPT}", "nproc=4", "rank_output=quiet"])
    _report, world = record_run(scenario, config, 0, path, force=True, launch=TEST_SCRIPTS)
    failure = world.failures[0]
    assert (failure["kind"], failure["ranks"], failure["step"]) == ("nan", ["r0", "r1"], NAN_STEP_INDEX + 1)
    return path, failure


def test_minimize_shrinks_a_four_rank_nan_to_the_two_ranks_it_involves(
    four_ranks: tuple[Path, dict], tmp_path: Path
) -> None:
    path, failure = four_ranks
    out = tmp_path / "repro.ttr"
    command = [sys.executable, "-m", "timetravel", "minimize", str(path), "--script", str(SCRIPT)]
    done = subprocess.run(
        [*command, "--out", str(out), "--max-seconds", str(BUDGET_S), "--json"],
        capture_output=True,
        text=True,
        timeout=BUDGET_S * 2,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert (result["nproc_before"], result["nproc_after"]) == (4, 2)
    assert result["same_failure"] == {
        "step": failure["step"],
        "tensor": failure["tensor"],
        "op": "all_reduce",
    }
    assert result["input_bytes"] == path.stat().st_size
    assert result["out_bytes"] == out.stat().st_size <= path.stat().st_size
    assert result["seconds"] <= BUDGET_S and result["partial"] is False
    with Session.open(out, launch=TEST_SCRIPTS) as repro:
        assert repro.header["config"]["nproc"] == 2
        world = repro.snapshot_world(len(repro.snapshots()) - 1)
    repro_failure = world.failures[0]
    assert (repro_failure["signature"], repro_failure["ranks"]) == (failure["signature"], ["r0", "r1"])
    assert (repro_failure["step"], repro_failure["tensor"]) == (failure["step"], failure["tensor"])


def test_over_its_budget_minimize_returns_the_best_so_far_as_partial(four_ranks: tuple[Path, dict]) -> None:
    path, _failure = four_ranks
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        result = minimize_run(session, budget=Budget(max_seconds=0.001))
    assert result.partial and result.stopped_by == "max_seconds" and result.runs == 1
    assert result.to_data()["nproc_after"] == 4  # the original: nothing was tried


def test_the_floor_keeps_every_rank_the_failure_involves() -> None:
    nan = {"kind": "nan", "node": "r0", "ranks": ["r0", "r1"]}
    assert size_floor("nproc", nan, {"nnodes": 1}) == 2
    assert size_floor("nproc", {"kind": "divergence", "node": "r5", "minority": ["r5"]}, {"nnodes": 2}) == 3
    hang = {"kind": "hang", "node": "r2", "waiting": "r0", "waiting_for": ["r2"]}
    assert size_floor("nproc", hang, {"nnodes": 1}) == 3
    assert size_floor("nnodes", nan, {"nnodes": 1}) is None


def test_a_candidate_failing_at_another_step_or_tensor_is_another_bug() -> None:
    scenario = get_scenario("torch")
    minimizer = Minimizer(scenario, {"nproc": 4}, 0, signature="nan:torch.collective.nonfinite")
    minimizer.identity = {"step": 4, "tensor": 0, "op": "all_reduce"}

    def trial(**fields: object) -> Trial:
        failure = {"signature": "nan:torch.collective.nonfinite", "step": 4, "tensor": 0, "op": "all_reduce"}
        return Trial("fail", {**failure, **fields}, 1, 1, [], [], 0, [])

    assert minimizer.same_failure(trial())
    assert not minimizer.same_failure(trial(step=7))
    assert not minimizer.same_failure(trial(tensor=1))
    assert not minimizer.same_failure(trial(signature="hang:torch.collective.hang"))


def test_a_trial_stops_once_it_has_run_past_the_failure() -> None:
    scenario = get_scenario("pingpong")
    candidate = Candidate(scenario.resolve_config(["rounds=200"]))
    whole = run_candidate(scenario, 0, candidate)
    stopped = run_candidate(scenario, 0, candidate, past=lambda world: world.events_processed >= 50)
    assert not whole.stopped_past_failure and whole.events > 200
    assert stopped.stopped_past_failure and stopped.outcome == "pass" and 50 <= stopped.events <= 64


def test_a_torch_run_is_past_its_failure_once_every_rank_completed_that_step() -> None:
    from timetravel.sim.world import World

    world = World("torch", {}, 0)
    world.add_node("c10d", "collectives", {"steps_checked": 3})
    assert not past_failure(world, {"step": 4})
    world.nodes["c10d"]["steps_checked"] = 4
    assert past_failure(world, {"step": 4})
    assert not past_failure(world, {"kind": "hang"})  # a failure of no step: trials run to their end
