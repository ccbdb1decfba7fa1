"""``diff A B --ops`` (issue 31, part 3): the first torch ops whose outputs differ between two branches.

A real 3-rank run of docs/examples/torch/ddp_mlp.py where a fault flips one bit of the result r1
receives from a gradient all_reduce, with the divergence detector off so the run trains on past the
flip (it ends in ``silent_corruption``; with the detector on it stops at that collective, before r1
receives the result); a branch from before the flip drops the fault. Both branches
are re-executed (the Stepper checks each event against the recorded hash chain, so a trace that
changed a bit of the World would raise instead of answering) with every rank's ops hashed; the first
differing op must be the collective on r1 in the step of the flip, its value one flipped bit.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from torch_launch import TEST_SCRIPTS
from torch_recordings import DDP_MLP, ROOT

from timetravel.explore import Session
from timetravel.explore.branching import branch
from timetravel.explore.commands.render import render_text
from timetravel.explore.compare import diff
from timetravel.explore.op_diff import differing_ops
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario

FLIP = {
    "kind": "corrupt",
    "target": "r1",
    "t_start": 1_000_000,
    "params": {"side": "result", "numel_min": 2, "bit": 19},
}
BRANCH_AT = "0.9ms"


def _record_flip_and_branch(path: Path, *settings: str) -> str:
    """Record the flipped run at ``path`` and a branch b1 from before the flip without it (it passes);
    the kind of failure the flipped run ended in."""
    scenario = get_scenario("torch")
    config = scenario.resolve_config(
        [
            f"script={DDP_MLP}",
            "nproc=3",
            "rank_output=quiet",
            "args=--steps 4",
            *settings,
            f"faults={json.dumps([FLIP])}",
        ]
    )
    report, _ = record_run(scenario, config, 0, path, force=True, launch=TEST_SCRIPTS)
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        made = branch(session, BRANCH_AT, {"drop_faults": ["f1"]})
    assert made.name == "b1" and made.outcome == "pass"
    return str(report["failure"]["kind"])


@pytest.fixture(scope="module")
def flipped(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("op_diff") / "flip.ttr"
    assert _record_flip_and_branch(path, "detect_divergence=false") == "silent_corruption"
    return path


def _flip_step(path: Path) -> int:
    """The optimizer step r1 was in when the fault flipped its result: one past the last step whose
    state r1's node stored before the fault's hit (read from the recording, not from --ops)."""
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        end = session.snapshot_world(len(session.snapshots()) - 1)
        line = next(entry for entry in end.log if "fault f1 (corrupt) on r1" in str(entry))
        session.goto_time(int(line[0]))
        return int(session.world.nodes["r1"].get("state_step", 0)) + 1


def test_the_first_differing_op_is_the_collective_on_r1_in_the_step_of_the_flip(flipped: Path) -> None:
    with Session.open(flipped, launch=TEST_SCRIPTS) as session:
        result = diff(session, "main", "b1", path="nodes/r1/params", ops=True)
        lines = render_text(result, session.display_unit)
    found = result.ops
    assert found is not None and found.step == _flip_step(flipped)
    first = found.ops[0]
    assert (first.rank, first.step, first.op) == ("r1", found.step, "c10d::all_reduce")
    assert first.index_a == first.index_b  # every op before it on r1 computed the same bits
    assert (first.differing, first.elements) == (1, first.shapes[0][0])  # one element: the flipped one
    assert first.max_ulp == 1 << 19 and first.max_abs_diff is not None and first.max_abs_diff > 0
    # then the ops it fed, on r1 only (the other replicas received the true sum), in execution order
    assert all(op.rank == "r1" for op in found.ops)
    assert [op.index_a for op in found.ops] == sorted(op.index_a or 0 for op in found.ops)
    assert found.compared > len(found.ops) and found.differing == len(found.ops)
    data = result.to_data()
    assert data["ops"][0]["op"] == "c10d::all_reduce" and data["ops"][0]["rank"] == "r1"
    assert data["ops_trace"]["step"] == found.step
    heading = next(line for line in lines if line.startswith("first differing ops, optimizer step"))
    assert f"optimizer step {found.step} re-executed on both branches" in heading
    assert any(
        line.startswith(f"  r1 step {found.step} at ") and "c10d::all_reduce #" in line for line in lines
    )


def test_the_cli_prints_the_ops_and_json_has_them(flipped: Path) -> None:
    command = [sys.executable, "-m", "timetravel", "diff", str(flipped), "main", "b1", "--ops"]
    done = subprocess.run(
        [*command, "--script", str(DDP_MLP), "--json"], capture_output=True, text=True, timeout=900, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-2000:]
    ops = json.loads(done.stdout)["ops"]
    assert ops[0]["rank"] == "r1" and ops[0]["op"] == "c10d::all_reduce" and ops[0]["max_ulp"] == 1 << 19
    refused = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr
    assert "pass --script PATH" in refused.stderr


def _record(index: int, module: str, op: str, occurrence: int, digest: str, t_ns: int = 0) -> list[Any]:
    return [index, t_ns, module, op, occurrence, [[4]], ["float32"], digest]


def test_ops_are_matched_by_module_op_and_occurrence_not_by_position() -> None:
    side_a = {0: [_record(0, "0", "aten::mm", 0, "x"), _record(1, "0", "aten::add", 0, "y")]}
    # b runs one more op first: by position every op would differ, by key only the add does
    side_b = {
        0: [
            _record(0, "", "aten::clone", 0, "c"),
            _record(1, "0", "aten::mm", 0, "x"),
            _record(2, "0", "aten::add", 0, "z"),
        ]
    }
    found, compared = differing_ops(side_a, side_b, set())
    assert compared == 2
    assert [(item[1], item[2], item[4] is None) for item in found] == [
        ("", "aten::clone", True),  # ran on b only
        ("0", "aten::add", False),
    ]


def test_at_one_time_the_rank_a_differing_fault_targets_comes_first() -> None:
    side_a = {rank: [_record(0, "", "c10d::all_reduce", 0, f"a{rank}", t_ns=5)] for rank in range(3)}
    side_b = {rank: [_record(0, "", "c10d::all_reduce", 0, f"b{rank}", t_ns=5)] for rank in range(3)}
    found, _ = differing_ops(side_a, side_b, {2})
    assert [item[0] for item in found] == [2, 0, 1]
    found, _ = differing_ops(side_a, side_b, set())
    assert [item[0] for item in found] == [0, 1, 2]


@pytest.mark.slow
def test_an_arrival_order_branch_differs_first_at_the_reduction_whose_sum_changed(tmp_path: Path) -> None:
    path = tmp_path / "order.ttr"
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={DDP_MLP}", "nproc=3", "rank_output=quiet", "args=--steps 8"])
    report, _ = record_run(scenario, config, 5, path, force=True, launch=TEST_SCRIPTS)
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        made = branch(session, report["t_end_ns"] // 2, {"settings": ["reduce_order=arrival"]})
        result = diff(session, "main", made.name, ops=True)
    assert result.ops is not None and result.ops.ops
    first = result.ops.ops[0]
    assert first.op == "c10d::all_reduce" and first.max_ulp is not None and first.max_ulp > 0
    # every rank received the same changed sum at the same time: r0 is listed first
    assert first.rank == "r0"


def test_the_tui_compare_screen_carries_the_ops_lines() -> None:
    from timetravel.explore.compare_results import DiffCommandResult
    from timetravel.explore.op_diff import OpDifference, OpsDiff
    from timetravel.tui.adapt import diff_data

    op = OpDifference(
        "r1", 3, "0 (backward)", "c10d::all_reduce", 0, ((577,),), ("float32",), 1_197_178, 18, 18
    )
    found = OpsDiff(3, (op,), 96, 1, 0, 75)
    data = diff_data(DiffCommandResult("main", "b1", 0, (), 0, None, ops=found), (), "ms")
    assert data.ops[0].startswith("first differing ops, optimizer step 3 re-executed on both branches")
    assert (
        data.ops[1] == "  r1 step 3 at 1.197178ms  0 (backward)  c10d::all_reduce #0  float32[577]: differs"
    )


def test_with_the_divergence_detector_on_the_collective_is_first_and_says_the_run_stopped_there(
    tmp_path: Path,
) -> None:
    # the detector fails the run as the flipped all_reduce completes: r1 never receives that result
    # on main, so the collective ran on b1 only, and the answer says why rather than only "b only"
    path = tmp_path / "caught.ttr"
    assert _record_flip_and_branch(path) == "divergence"
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        found = diff(session, "main", "b1", path="nodes/r1/params", ops=True).ops
    assert found is not None and found.ops
    first = found.ops[0]
    assert (first.rank, first.op, first.index_a) == ("r1", "c10d::all_reduce", None)
    assert first.note == "ran on b only: the run on main failed (divergence) before r1 received its result"
