"""``explain`` on a torch run ends at the rank, the step, its batch's sampler indices and the first
non-finite module (issue 14, part 3), on the planted NaN of docs/examples/torch/ddp_loader.py.

The recording is a real 3-rank run of ddp_mlp.py's model whose batches come from a DataLoader with a
DistributedSampler; rank 2's batch of its 8th optimizer step (the script's 0-based step 7) gets a NaN.
The expected sampler indices are computed here from DistributedSampler's documented algorithm, not
read back from timetravel. The module probe re-executes the run with hooks in the rank processes;
the Stepper it runs on checks every re-executed event against the recorded hash chain, so a probe
that changed a bit of the World would raise instead of answering.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import types
from pathlib import Path

import pytest
import torch
from torch_launch import TEST_SCRIPTS
from torch_recordings import explain_process

from timetravel.explore import Session, explain_torch
from timetravel.explore.branching import branch
from timetravel.explore.commands.render import render_text
from timetravel.explore.explain import explain
from timetravel.explore.explain_torch import failure_site
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.sim.context import Context
from timetravel.sim.event import Event
from timetravel.sim.world import World
from timetravel.torch.protocol.limits import BATCH_INDICES_MAX
from timetravel.torch.rank.batches import _plain_indices
from timetravel.torch.world import kept_checkpoints, workdir
from timetravel.torch.world import state as training_state
from timetravel.torch.world.specs import launch_naming

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "docs" / "examples" / "torch"
DDP_MLP = EXAMPLES / "ddp_mlp.py"
DDP_LOADER = EXAMPLES / "ddp_loader.py"
GPU_STYLE = EXAMPLES / "gpu_style.py"
RANKS = 3
SAMPLES = 256
BATCH = 8
NAN_STEP_INDEX = 7
"""The script's 0-based loop step that plants the NaN on rank 2 (ddp_mlp.py --bug nan_data)."""


def record(path: Path, script: Path, ranks: int, args: str) -> dict:
    launch = launch_naming([str(script)])
    scenario = get_scenario("torch")
    config = scenario.resolve_config(
        [f"script={script}", f"nproc={ranks}", "rank_output=quiet", f"args={args}"]
    )
    report, _world = record_run(scenario, config, 3, path, force=True, launch=launch)
    return report


def distributed_sampler_batch(rank: int, step_index: int, epoch: int = 0) -> list[int]:
    """What DistributedSampler(shuffle=True, seed=0) gives ``rank`` for batch ``step_index``: a
    seeded permutation, padded to a multiple of the ranks, strided by rank."""
    generator = torch.Generator()
    generator.manual_seed(0 + epoch)
    order = torch.randperm(SAMPLES, generator=generator).tolist()
    total = math.ceil(SAMPLES / RANKS) * RANKS
    order += order[: total - len(order)]
    mine = order[rank:total:RANKS]
    return mine[step_index * BATCH : (step_index + 1) * BATCH]


@pytest.fixture(scope="module")
def nan_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("torch_explain") / "nan_loader.ttr"
    report = record(path, DDP_LOADER, RANKS, "--steps 9 --bug nan_data")
    assert report["outcome"] == "fail" and report["failure"]["kind"] == "nan", report["failure"]
    return path


def test_the_world_keeps_each_step_s_sampler_indices_per_rank(nan_run: Path) -> None:
    with Session.open(nan_run, launch=TEST_SCRIPTS) as session:  # stored state: no execution
        world = session.snapshot_world(len(session.snapshots()) - 1)
        for rank in range(RANKS):
            batch = world.nodes[f"r{rank}"]["batch"]
            assert batch["step"] == NAN_STEP_INDEX + 1  # every rank loaded its 8th step's batch
            assert batch["indices"] == distributed_sampler_batch(rank, NAN_STEP_INDEX)
            assert (batch["batches"], batch["indices_dropped"]) == (1, 0)


def test_explain_names_the_rank_the_step_the_indices_and_the_first_non_finite_module(nan_run: Path) -> None:
    users = kept_checkpoints.SHARED.users
    opened = len(workdir._open)
    with Session.open(nan_run, launch=TEST_SCRIPTS) as session:
        directories = len(workdir._open)
        probed = failure_site(session, session.reader.end(session.branch)["failure"])
        # the probed ranks' working directory is removed too; what stays open is the directory of
        # the checkpoints the probe's start rebuilt (as a seek would), closed with the session
        assert all(
            any(kept is directory for kept in kept_checkpoints.SHARED.directories)
            for directory in workdir._open[directories:]
        )
        result = explain(session)
    assert len(workdir._open) == opened
    assert result.site == probed  # the probe is deterministic: the same answer twice
    # explain's track of the branch closed its world source: no checkpoint outlives the session
    assert kept_checkpoints.SHARED.users == users
    # the chain: the detector, then r2's call that fed the NaN; the rest is r2's own step (the site),
    # and no fault explains it (the run has none)
    assert [(link.role, link.node) for link in result.links] == [
        ("detector", "c10d"),
        ("message", "r2"),
        ("root", "r2"),
    ]
    assert result.links[-1].what.startswith("no fault explains it: the fault schedule is empty; the nan is")
    assert result.complete
    site = result.site
    assert site is not None
    assert (site.rank, site.step) == ("r2", NAN_STEP_INDEX + 1)
    assert list(site.indices or ()) == distributed_sampler_batch(2, NAN_STEP_INDEX)
    assert site.probe == "found", site.probe_note
    module = site.module or {}
    # the NaN is at inputs[0, 0]: the first Linear's output row 0 is NaN, and its input was already
    assert (module["module"], module["module_class"], module["where"]) == ("0", "Linear", "forward")
    assert (module["tensor"], module["inputs_nonfinite"], module["value"]) == (0, [0], "nan")
    assert (module["shape"], module["nonfinite"], module["first_index"]) == ([BATCH, 32], 32, 0)
    data = result.to_data()["site"]
    assert data["rank"] == "r2" and data["indices"] == distributed_sampler_batch(2, NAN_STEP_INDEX)
    lines = render_text(result, session.display_unit)
    assert f"at r2, optimizer step {NAN_STEP_INDEX + 1} ({NAN_STEP_INDEX} completed before it)" in lines
    shown = ", ".join(str(index) for index in distributed_sampler_batch(2, NAN_STEP_INDEX))
    assert f"  sampler indices of its batch: [{shown}]" in lines
    assert any(line.startswith("  first non-finite module: 0 (Linear), forward output 0:") for line in lines)


def test_the_probe_starts_at_a_snapshot_before_the_step_and_answers_as_from_the_start(
    nan_run: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Session.open(nan_run, launch=TEST_SCRIPTS) as session:
        failure = session.reader.end(session.branch)["failure"]
        near = failure_site(session, failure)
        assert near is not None and near.probe == "found", near
        # the snapshot it started at: r2 waits there, before its step 8 began (at most 6 completed)
        starts = {snapshot.events: index for index, snapshot in enumerate(session.snapshots())}
        assert near.probe_from in starts and 0 < near.probe_from < session.end.events
        world = session.snapshot_world(starts[near.probe_from])
        assert world.nodes["r2"]["status"] == "waiting"
        assert world.nodes["c10d"]["steps_checked"] <= NAN_STEP_INDEX + 1 - 2
        monkeypatch.setattr(explain_torch, "probe_start", lambda *_args: None)
        from_start = failure_site(session, failure)
    assert from_start is not None and from_start.probe_from == 0
    # from #0 the probe also watched the parameters from their allocation: every one was initialised
    memory = from_start.uninitialised or {}
    assert memory["report"]["uninitialised_count"] == 0 and memory["report"]["parameters"] == 4
    assert near.uninitialised is None  # a resumed process cannot tell: its parameters exist already
    same = dataclasses.replace(near, probe_from=0, uninitialised=from_start.uninitialised)
    assert same == from_start  # the same rank, step and module


def test_a_resumed_rank_refuses_the_probe_when_it_may_be_inside_the_step_already() -> None:
    from timetravel.torch.rank.setup import _install_probe

    class Posts:
        def __init__(self) -> None:
            self.messages: list[dict] = []

        def post(self, message: dict) -> None:
            self.messages.append(message)

    channel, reporter = Posts(), types.SimpleNamespace(steps=7)
    _install_probe(channel, reporter, {"kind": "probe", "step": 8}, resumed=True)  # type: ignore[arg-type]
    assert [(m["kind"], m["step"], m["finding"]) for m in channel.messages] == [("probe", 8, None)]
    assert channel.messages[0]["refused"].startswith("the rank had completed 7 optimizer steps")


@pytest.mark.slow
def test_explain_probes_a_branch_from_a_snapshot_after_its_fork(nan_run: Path, tmp_path: Path) -> None:
    path = tmp_path / "branched.ttr"
    shutil.copyfile(nan_run, path)
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        made = branch(session, "0.5ms", {"branch_key": 1})  # other compute jitter, the same bug
    with Session.open(path, branch=made.name, launch=TEST_SCRIPTS) as session:
        result = explain(session)
        fork = session.fork_events
    site = result.site
    assert site is not None and (site.rank, site.step, site.probe) == ("r2", NAN_STEP_INDEX + 1, "found")
    assert site.probe_from is not None and site.probe_from >= fork > 0
    assert (site.module or {}).get("module") == "0" and (site.module or {}).get("where") == "forward"


def test_without_script_explain_answers_from_the_recording_and_names_the_option(nan_run: Path) -> None:
    done = explain_process(nan_run, timeout_s=300)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stdout.splitlines()
    assert f"at r2, optimizer step {NAN_STEP_INDEX + 1} ({NAN_STEP_INDEX} completed before it)" in lines
    assert "sampler indices of its batch: [" in done.stdout
    needs = [line for line in lines if "--script PATH" in line]
    assert [line.split(":")[0] for line in needs] == [
        "     (read from the recording",
        "  first non-finite module",
    ]
    # no fault acted: the stored answer is the script's own, with what re-executing would add
    assert not any("nothing upstream" in line for line in lines)
    assert any(
        line.startswith("   the script r2: no fault explains it: the fault schedule is empty")
        for line in lines
    )
    as_json = explain_process(nan_run, "--json", timeout_s=300)
    site = json.loads(as_json.stdout)["site"]
    assert (site["rank"], site["step"], site["probe"], site["module"]) == ("r2", 8, "not_run", None)
    assert site["indices"] == distributed_sampler_batch(2, NAN_STEP_INDEX)


def test_a_failure_that_is_not_a_nan_gets_its_site_and_no_probe(tmp_path: Path) -> None:
    path = tmp_path / "mismatch.ttr"
    report = record(path, DDP_MLP, RANKS, "--steps 7 --bug skip_collective")  # r1 skips an all_reduce
    assert report["outcome"] == "fail" and report["failure"]["node"] == "r1", report["failure"]
    done = explain_process(path, "--json", timeout_s=300)
    assert done.returncode == 0, done.stderr
    site = json.loads(done.stdout)["site"]
    assert (site["rank"], site["probe"], site["module"]) == ("r1", "not_run", None)
    # r1 skips the loss all_reduce after its 6th optimizer step (the script's step 5); the mismatch
    # is its next collective, DDP's gradient bucket in the 7th
    assert site["step"] == 7
    assert site["probe_note"].startswith(f"none looked for (a {report['failure']['kind']} failure")
    assert "pass --script PATH" in site["probe_note"]  # the chain is what --script would add


@pytest.mark.slow
def test_without_a_dataloader_explain_says_so_and_still_names_the_module(tmp_path: Path) -> None:
    path = tmp_path / "ddp_mlp.ttr"
    report = record(path, DDP_MLP, RANKS, "--steps 9 --bug nan_data")  # batches from a generator
    assert report["outcome"] == "fail", report["failure"]
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        site = explain(session).site
    assert site is not None and (site.rank, site.step) == ("r2", NAN_STEP_INDEX + 1)
    assert site.indices is None
    assert site.indices_note == "no DataLoader: the script draws its batches itself"
    assert (site.module or {}).get("module") == "0" and (site.module or {}).get("where") == "forward"


@pytest.mark.slow
def test_an_inf_scaled_loss_is_found_at_the_gradient_of_the_last_module_and_no_dataloader_is_said(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gpu_style.ttr"
    report = record(path, GPU_STYLE, 2, "--bug nan_scale")
    assert report["outcome"] == "fail" and report["failure"]["kind"] == "nan", report["failure"]
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        site = explain(session).site
    assert site is not None
    assert (site.rank, site.step) == ("r1", 5)  # the script's 0-based step 4
    assert site.indices is None and site.indices_note.startswith("no DataLoader")
    module = site.module or {}
    # loss * inf happens outside any module: the first non-finite is the head's output gradient
    assert (module["module"], module["module_class"], module["where"]) == ("2", "Linear", "gradient")
    assert module["inputs_nonfinite"] == []


def test_sampler_yields_become_plain_indices_or_nothing() -> None:
    assert _plain_indices([3, 1, 2]) == [3, 1, 2]
    assert _plain_indices(torch.tensor([4, 5])) == [4, 5]
    assert _plain_indices(7) == [7]  # batch_size=None: one index per batch
    assert _plain_indices([None, None]) is None  # an IterableDataset's sampler
    assert _plain_indices(["a"]) is None


def test_a_step_keeps_at_most_the_named_limit_of_indices_and_counts_the_rest() -> None:
    state: dict = {"incarnation": 0}
    context = Context(World("torch", {"detect_duplicate_batches": "off"}, 0))
    half = BATCH_INDICES_MAX // 2 + 1
    for first in (0, half):
        payload = {"step": 4, "indices": list(range(first, first + half)), "dropped": 0, "incarnation": 0}
        training_state.on_batch(state, Event(0, 0, "r0", "batch", payload), context)
    assert state["batch"]["step"] == 4 and state["batch"]["batches"] == 2
    assert state["batch"]["indices"] == list(range(BATCH_INDICES_MAX))
    assert state["batch"]["indices_dropped"] == 2 * half - BATCH_INDICES_MAX
    payload = {"step": 5, "indices": [9], "dropped": 3, "incarnation": 0}
    training_state.on_batch(state, Event(0, 0, "r0", "batch", payload), context)
    assert state["batch"] == {"step": 5, "indices": [9], "batches": 1, "indices_dropped": 3}


def test_the_tui_s_explain_pane_ends_with_the_site() -> None:
    from timetravel.explore.explain_results import ExplainResult, FailureSite
    from timetravel.tui.adapt import explain_rows

    finding = {"module": "2", "module_class": "Linear", "where": "gradient", "tensor": 0, "nonfinite": 64}
    finding.update(
        elements=64, first_index=5, value="inf", shape=[16, 4], dtype="bfloat16", inputs_nonfinite=[]
    )
    site = FailureSite(
        "r1", 5, None, "no DataLoader: the script draws its batches itself", 0, "found", "", finding
    )
    failure = {
        "kind": "nan",
        "node": "r1",
        "t_ns": 700,
        "message": "r1 fed 8",
        "signature": "nan:torch.collective.nonfinite",
    }
    _headline, rows = explain_rows(ExplainResult("main", failure, (), site=site), "ms")
    assert (rows[-1].head, rows[-1].what, rows[-1].t_ns) == (
        "at r1",
        "optimizer step 5 (4 completed before it)",
        700,
    )
    assert rows[-1].changes == (
        "  sampler indices: none (no DataLoader: the script draws its batches itself)",
        "  first non-finite module: 2 (Linear), gradient of output 0: 64 of 64 elements non-finite, "
        "first [1, 1] = inf (bfloat16[16, 4])",
    )
