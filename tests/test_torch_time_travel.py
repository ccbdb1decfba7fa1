"""Time travel on the user's own training run (issue 14's acceptance), on docs/examples/torch/ddp_mlp.py.

Each test records a real run of the example (3 ranks, real torch.distributed calls served by the
World), then works on the recording through the same functions every front end calls: seek, search,
branch, compare, diff, rerun. Re-execution resumes forked checkpoints of the rank processes, and
every re-executed event is checked against the recorded hash chain.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)
from torch_launch import TEST_SCRIPTS

from timetravel.explore import Session
from timetravel.explore.branching import branch
from timetravel.explore.compare import compare, diff
from timetravel.explore.divergence import first_divergence
from timetravel.explore.rerun import rerun
from timetravel.explore.search import find_first
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.torch.world import kept_checkpoints
from timetravel.torch.world.specs import launch_naming

ROOT = Path(__file__).resolve().parent.parent
DDP_MLP = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"
FLIP_AT_NS = 1_500_000
"""A corrupt fault's start: the first gradient all_reduce result r1 receives after it gets one bit
flipped (a tensor of at least 2 elements: not the loss scalar)."""


def record(path: Path, *settings: str, seed: int = 3) -> dict:
    launch = launch_naming([str(DDP_MLP)])
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={DDP_MLP}", "nproc=3", "rank_output=quiet", *settings])
    report, _world = record_run(scenario, config, seed, path, force=True, launch=launch)
    return report


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("torch_time_travel")


def test_a_planted_nan_is_found_where_it_entered_and_the_fix_passes(folder: Path) -> None:
    path = folder / "nan.ttr"
    report = record(path, "args=--steps 9 --bug nan_data")
    assert report["outcome"] == "fail" and report["failure"]["kind"] == "nan"
    failure = report["failure"]
    seq, group = re.search(r"#(\d+) of group (\S+) ", failure["message"]).groups()
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        session.goto(failure["t_ns"] // 2)  # rewind to a time before the NaN: nothing is non-finite yet
        assert not any(record["in_nonfinite"] for record in session.world.nodes["c10d"]["last"].values())
        found = find_first(session, "nodes/c10d/last/*/in_nonfinite > 0")
        assert found.found and found.witnesses == ("nodes/c10d/last/2/in_nonfinite",)  # r2 fed it
        session.goto_event(found.event)
        entered = session.world.nodes["c10d"]["last"]["2"]
        assert (entered["op"], entered["key"]) == (
            "all_reduce",
            f"{group}#{seq}",
        )  # the detector's collective
        assert session.world.nodes["r2"]["state_step"] == 7  # the optimizer step it happened in (7 done)
        fixed = rerun(session, ["args=--steps 9"])  # the bug's flag off: today's script, same seed
    assert fixed.outcome == "pass", fixed.failure


@pytest.fixture(scope="module")
def flipped(folder: Path) -> tuple[Path, dict]:
    path = folder / "flip.ttr"
    faults = [
        {
            "kind": "corrupt",
            "target": "r1",
            "t_start": FLIP_AT_NS,
            "params": {"side": "result", "numel_min": 2},
        }
    ]
    return path, record(path, "args=--steps 8", f"faults={json.dumps(faults)}")


def test_a_flipped_bit_in_one_rank_s_result_is_a_divergence_a_branch_without_it_passes(
    flipped: tuple[Path, dict],
) -> None:
    path, report = flipped
    assert report["outcome"] == "fail" and report["failure"]["kind"] == "divergence"
    assert report["failure"]["node"] == "r1"
    # found where the flip happened: at the collective whose result r1 received, not steps later
    assert re.match(
        r"in optimizer step \d+, r1 received another result from all_reduce 0#\d+ \(group 0, seq \d+\) than "
        r"the other 2 members: output tensor 0 \(float32\[577\]\), first at element \d+$",
        report["failure"]["message"],
    ), report["failure"]["message"]
    users = kept_checkpoints.SHARED.users
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        fixed = branch(session, FLIP_AT_NS - 1, {"drop_faults": ["f1"]})
        assert fixed.outcome == "pass", fixed.failure
        compared = compare(session, "main", fixed.name)
        first = compared.first_divergence
        assert first is not None and first.node == "c10d" and first.t_ns >= FLIP_AT_NS
        assert "all_reduce 0#" in first.reason and "on r1, output tensor 0" in first.reason
        assert compared.metric_rows[0].name == "loss"  # recorded after lr and the grad norms: listed first
        changed = diff(session, "main", fixed.name, at=report["failure"]["t_ns"], path="nodes/c10d/last/1")
        session.goto(report["failure"]["t_ns"])
        hit_line = next(entry[2] for entry in session.world.log if str(entry[2]).startswith("fault f1"))
    # every track the branch, compare and diff opened on other branches ended with the session: no
    # rank checkpoint outlives it (they kept the shared checkpoints alive before)
    assert kept_checkpoints.SHARED.users == users
    assert [entry.path for entry in changed.paths] == ["nodes/c10d/last/1/out_digest/0"]  # r1's result
    element = report["failure"]["message"].rsplit(" ", 1)[1]
    assert f"result: element {element} bit" in hit_line  # the element the flip hit, named by the detector


def test_the_first_divergence_is_dated_at_the_completion_of_the_collective_whose_results_differ(
    flipped: tuple[Path, dict],
) -> None:
    path, _report = flipped
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        fixed = branch(session, FLIP_AT_NS - 1, {"drop_faults": ["f1"]})
        first = first_divergence(session, "main", fixed.name)
        assert first is not None and first.event_a is not None and first.event_t_ns is not None
        completing = session.event(first.event_a)
        assert completing is not None and (completing.node, completing.kind) == ("c10d", "call")
        assert first.event_t_ns == completing.t_ns  # the last member's entry, which completed it
        session.goto_event(first.event_a)
        record = session.world.nodes["c10d"]["last"]["1"]  # r1 received the flipped result
        assert record["state"] == "completed" and "on r1, output tensor 0" in first.reason
        assert first.t_ns == record["t_done_ns"] > completing.t_ns >= FLIP_AT_NS - 1
        assert f"{record['op']} {record['key']}" in first.reason
        assert first.to_data()["t_ns"] == record["t_done_ns"]


def test_summation_order_from_the_middle_of_a_passing_run_shows_the_ulp_spread(folder: Path) -> None:
    path = folder / "order.ttr"
    report = record(path, "args=--steps 8", seed=5)
    assert report["outcome"] == "pass"
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        middle = report["t_end_ns"] // 2
        arrival = branch(session, middle, {"settings": ["reduce_order=arrival"]})
        assert arrival.outcome == "pass"
        compared = compare(session, "main", arrival.name)
        first = compared.first_divergence
        assert first is not None and first.t_ns >= middle  # the first collective after the fork
        assert "the first collective whose outputs differ" in first.reason
        at_end = diff(session, "main", arrival.name, at="end", path="nodes/r0/params")
    spreads = [entry.summary for entry in at_end.paths if entry.path.startswith("nodes/r0/params/")]
    assert spreads and all("ulp" in summary for summary in spreads)


def test_at_a_hang_the_tui_s_ranks_show_whom_they_wait_for(folder: Path) -> None:
    from timetravel.tui.feed import rank_cells_from_world

    path = folder / "hang.ttr"
    report = record(path, "args=--steps 6 --bug skip_collective")
    assert report["outcome"] == "fail" and report["failure"]["kind"] == "hang"
    assert report["failure"]["node"] == "r1"  # the rank that skipped its all_reduce
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        session.goto("end")  # the recorded end: the hang, with its flight recorder (no execution)
        cells = {cell.name: cell for cell in rank_cells_from_world(session.world, session.scenario.view)}
    assert set(cells) == {"r0", "r1", "r2"}
    assert cells["r0"].waiting_on == cells["r2"].waiting_on == "r1"
    assert cells["r1"].waiting_on != "r1"


@pytest.mark.slow
def test_minimize_writes_a_repro_whose_pytest_runs_the_script_and_fails_until_fixed(
    flipped: tuple[Path, dict], tmp_path: Path
) -> None:
    import subprocess
    import sys

    path, report = flipped
    out, test_file = tmp_path / "repro.ttr", tmp_path / "test_repro.py"
    command = [sys.executable, "-m", "timetravel", "minimize", str(path), "--script", str(DDP_MLP)]
    done = subprocess.run(
        [*command, "--out", str(out), "--pytest", str(test_file)], capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr
    assert "faults  1 -> 1: f1" in done.stdout  # the flip is what the failure needs
    assert str(DDP_MLP) in test_file.read_text()  # the test runs the script the user named
    red = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert red.returncode == 1 and report["failure"]["signature"] in red.stdout  # red while the bug is there
