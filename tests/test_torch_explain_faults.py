"""``explain`` on a torch run a fault caused ends at that fault (issue 14, part 3): the event its hit
was in, with the collective it hit, then its record; and says so when no fault explains the failure.

The recordings are real 3-rank runs of docs/examples/torch/ddp_mlp.py. What the chain must name is
taken from the fault record (its id, kind, target, pinned element and bit) and from the recorded
event stream (the collective a call event enters), not from timetravel's own answer.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)
from torch_launch import TEST_SCRIPTS
from torch_recordings import explain_process

from timetravel.explore import Session
from timetravel.explore.commands.render import render_text
from timetravel.explore.explain import explain
from timetravel.explore.explain_results import ExplainResult
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.torch.world.specs import launch_naming
from timetravel.tui.adapt import explain_rows

ROOT = Path(__file__).resolve().parent.parent
DDP_MLP = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"
RANKS = 3
FLIP = {
    "kind": "corrupt",
    "target": "r1",
    "t_start": 1_000_000,
    "params": {"side": "result", "numel_min": 2, "element": 5, "bit": 30},
}


def record(path: Path, args: str, faults: list[dict]) -> dict:
    launch = launch_naming([str(DDP_MLP)])
    scenario = get_scenario("torch")
    settings = [f"script={DDP_MLP}", f"nproc={RANKS}", "rank_output=quiet", f"args={args}"]
    config = scenario.resolve_config([*settings, f"faults={json.dumps(faults)}"])
    report, _world = record_run(scenario, config, 3, path, force=True, launch=launch)
    return report


def explained(path: Path) -> ExplainResult:
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        return explain(session)


def entered(path: Path, event: int) -> dict:
    """The collective the recorded call event #``event`` enters, from the event stream itself."""
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        recorded = session.event(event)
    assert recorded is not None and recorded.kind == "call" and recorded.node == "c10d", recorded
    payload = recorded.payload
    return {
        "op": payload["op"],
        "collective": f"{payload['group']}#{payload['seq']}",
        "rank": payload["rank"],
    }


@pytest.fixture(scope="module")
def flip_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("torch_explain_faults") / "flip.ttr"
    report = record(path, "--steps 5", [FLIP])
    assert report["outcome"] == "fail" and report["failure"]["kind"] == "divergence", report["failure"]
    return path


def test_a_bit_flip_divergence_ends_at_the_fault_the_collective_it_hit_and_its_record(flip_run: Path) -> None:
    result = explained(flip_run)
    assert [link.role for link in result.links] == ["detector", "fault", "root"], result.links
    assert result.complete
    _detector, hit, root = result.links
    assert hit.event is not None and hit.t_ns is not None
    collective = entered(flip_run, hit.event)
    assert collective["op"] == "all_reduce"
    failure = result.failure or {}
    assert FLIP["t_start"] <= hit.t_ns <= failure["t_ns"]
    assert hit.fault is not None
    assert (hit.fault["id"], hit.fault["kind"], hit.fault["target"]) == ("f1", "corrupt", "r1")
    assert (hit.fault["op"], hit.fault["collective"], hit.fault["t_ns"]) == (
        "all_reduce",
        collective["collective"],
        hit.t_ns,
    )
    assert "element 5 bit 30" in hit.fault["hit"] and "result" in hit.fault["hit"]
    assert hit.what.startswith(f"fault f1 (corrupt) acted on r1 in all_reduce {collective['collective']} ")
    # the divergence names the collective whose results differ (world/replicas.py): the fault hit it
    assert hit.because == f"hit {collective['collective']}, the collective the divergence names"
    assert (root.kind, root.t_ns, root.node) == ("fault record", FLIP["t_start"], "r1")
    assert root.what.startswith("f1 corrupt r1 side=result")
    # the site is the step the divergence names (the failure record's own step, not one later)
    assert result.site is not None and result.site.step == int(failure["message"].split()[3].rstrip(","))

    # one result, every front end: the text (CLI and shell), the JSON, the TUI's explain pane
    lines = render_text(result, "ms")
    assert f"<- #{hit.event} " in "\n".join(lines) and any(hit.what in line for line in lines)
    assert f"     because it hit {collective['collective']}, the collective the divergence names" in lines
    data = result.to_data()
    assert data["links"][1]["fault"]["collective"] == collective["collective"]
    _headline, rows = explain_rows(result, "ms")
    assert [(row.role, row.what) for row in rows[1:3]] == [("fault", hit.what), ("root", root.what)]


def test_a_nan_a_bit_flip_caused_names_the_rank_s_step_and_the_fault_that_fed_it(tmp_path: Path) -> None:
    """Bit 30 of an element of r1's contribution: the summed gradient is ~4e37 on every rank, the
    next steps overflow, and every rank feeds an Inf into a later all_reduce (the nan names them all,
    the lowest first). Each rank's own step made the non-finite values, from what the fault corrupted:
    the chain must not say the step alone did."""
    path = tmp_path / "nan.ttr"
    flip = {**FLIP, "params": {**FLIP["params"], "side": "contribution"}}
    report = record(path, "--steps 6", [flip])
    failure = report["failure"]
    assert report["outcome"] == "fail" and (failure["kind"], failure["node"]) == ("nan", "r0"), failure
    assert failure["message"].startswith("r0, r1 and r2 fed non-finite values into all_reduce #")
    result = explained(path)
    assert [link.role for link in result.links] == ["detector", "message", "fault", "root"], result.links
    _detector, rank, hit, root = result.links
    assert rank.node == "r0" and rank.what == (
        "sent the call whose inputs held the non-finite values: r0's own step made them (below), "
        "from values the fault in the next link corrupted"
    )
    assert hit.because == "hit r1, a rank the nan involves"
    assert hit.event is not None and hit.fault is not None
    collective = entered(path, hit.event)
    assert (hit.fault["id"], hit.fault["collective"]) == ("f1", collective["collective"])
    assert "contribution: element 5 bit 30" in hit.fault["hit"]
    assert root.what.startswith("f1 corrupt r1 side=contribution")
    assert result.site is not None and result.site.rank == "r0"


def test_the_cli_json_names_the_fault_and_its_collective(flip_run: Path) -> None:
    done = explain_process(flip_run, "--script", str(DDP_MLP), "--json", timeout_s=600)
    assert done.returncode == 0, done.stderr[-2000:]
    links = json.loads(done.stdout)["links"]
    fault = links[1]["fault"]
    assert (links[1]["role"], fault["id"], fault["op"]) == ("fault", "f1", "all_reduce")
    assert fault["collective"] == entered(flip_run, links[1]["event"])["collective"]
    assert links[2]["role"] == "root" and links[2]["what"].startswith("f1 corrupt r1")


def test_without_script_explain_still_names_the_fault_and_its_event_from_the_recording(
    flip_run: Path,
) -> None:
    """No ``--script``: nothing re-executes, yet the fault, the event it acted in and its collective
    are in the recording. They must be the ones the re-executing explain finds."""
    executed = explained(flip_run)
    _detector, hit, _root = executed.links
    done = explain_process(flip_run, "--json", timeout_s=600)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)
    assert [link["role"] for link in data["links"]] == ["fault", "root"]
    stored = data["links"][0]
    assert (stored["event"], stored["what"], stored["because"]) == (hit.event, hit.what, hit.because)
    assert stored["fault"] == hit.fault
    assert stored["otherwise"].startswith("read from the recording: with --script PATH")
    assert data["traced_events"] == 0 and data["site"]["probe"] == "not_run"


def test_a_dropped_contribution_s_hang_ends_at_the_drop_in_the_collective_it_hangs_in(tmp_path: Path) -> None:
    path = tmp_path / "drop.ttr"
    report = record(path, "--steps 4", [{"kind": "drop", "target": "r1", "t_start": 1_000_000}])
    assert report["outcome"] == "fail" and report["failure"]["kind"] == "hang", report["failure"]
    result = explained(path)
    assert [link.role for link in result.links] == ["detector", "fault", "root"], result.links
    hit = result.links[1]
    assert hit.event is not None and hit.fault is not None
    collective = entered(path, hit.event)
    assert collective["rank"] == 1  # the event is r1 entering: its contribution is what was dropped
    assert f"(collective {collective['collective']})" in report["failure"]["message"]  # the hung one
    assert (hit.fault["id"], hit.fault["kind"], hit.fault["collective"]) == (
        "f1",
        "drop",
        collective["collective"],
    )
    assert hit.what.endswith(": contribution dropped")
    assert hit.because == f"hit {collective['collective']}, the collective the hang names"


def test_a_script_bug_says_no_fault_explains_it_even_when_a_fault_acted(tmp_path: Path) -> None:
    path = tmp_path / "skip.ttr"
    straggler = {"kind": "slow", "target": "r2", "t_start": 0}  # acts at every call of r2, harmlessly
    report = record(path, "--steps 7 --bug skip_collective", [straggler])
    failure = report["failure"]
    assert report["outcome"] == "fail" and failure["kind"] == "collective_mismatch", failure
    result = explained(path)
    assert [link.role for link in result.links] == ["detector", "root"], result.links
    last = result.links[-1]
    assert (last.kind, last.node, last.fault) == ("the script", failure["node"], None)
    assert last.what == (
        "no fault explains it: f1 (slow) on r2 acted, but no fault kind causes a collective_mismatch; "
        f"the collective_mismatch is the script's own doing (its code on {failure['node']}: see the step below)"
    )


@pytest.mark.slow
def test_a_partition_that_never_heals_is_named_though_it_cuts_another_rank(tmp_path: Path) -> None:
    path = tmp_path / "partition.ttr"
    report = record(path, "--steps 4", [{"kind": "partition", "target": "r2", "t_start": 1_000_000}])
    failure = report["failure"]
    assert report["outcome"] == "fail" and failure["kind"] == "hang", failure
    # every member entered: the message says what holds it, not "waiting for" nobody
    assert "every member entered; a partition that never heals holds it" in failure["message"]
    result = explained(path)
    assert [link.role for link in result.links] == ["detector", "fault", "root"], result.links
    hit = result.links[1]
    assert hit.fault is not None and hit.event is not None
    assert (hit.fault["kind"], hit.fault["target"]) == ("partition", "r2")
    assert failure["node"] != "r2"  # the hang names a waiting rank; the partition cut r2 off
    assert hit.fault["collective"] == entered(path, hit.event)["collective"]
    assert f"(collective {hit.fault['collective']})" in failure["message"]
