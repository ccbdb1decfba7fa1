"""Seeking a torch recording from its journal (torch/world/journal.py): no rank process runs, the
seek reaches the recorded bits, and tensors stay digests (sim/elided.py) until a command reads them,
which rebuilds them by re-executing the ranks — the same values a re-execution always gave."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)
from torch_launch import TEST_SCRIPTS
from world_sources import hashes_along

from timetravel.explore import Session
from timetravel.explore.commands import open_context, run_line
from timetravel.explore.inspect_view import summarize
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.sim.elided import ElidedArray, ElidedError
from timetravel.sim.encoding import array_digest
from timetravel.torch.world.specs import launch_naming

ROOT = Path(__file__).resolve().parent.parent
DDP_MLP = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"
GPT = ROOT / "docs" / "examples" / "torch" / "tiny_gpt.py"
TARGETS = [70, 140, 200, 30, 150, 64]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("journal") / "ddp.ttr"
    scenario = get_scenario("torch")
    config = scenario.resolve_config([f"script={DDP_MLP}", "nproc=3", "args=--steps 10", "rank_output=quiet"])
    report, _world = record_run(
        scenario, config, 5, path, snapshot_every_events=64, force=True, launch=launch_naming([str(DDP_MLP)])
    )
    assert report["outcome"] == "pass", report["failure"]
    return path, report


@pytest.fixture(scope="module")
def gpt_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run whose collectives carry tensors above the elision size (4 KiB): 100k parameters."""
    path = tmp_path_factory.mktemp("journal") / "gpt.ttr"
    scenario = get_scenario("torch")
    arguments = "--steps 3 --width 64 --layers 2 --bucket-mb 1 --context 16 --batch 4"
    config = scenario.resolve_config([f"script={GPT}", "nproc=2", f"args={arguments}", "rank_output=quiet"])
    report, _world = record_run(scenario, config, 1, path, force=True, launch=launch_naming([str(GPT)]))
    assert report["outcome"] == "pass", report["failure"]
    return path


def test_seeks_replay_the_journal_without_ranks_and_reach_the_bits_of_a_re_execution(
    recording: tuple[Path, dict[str, Any]],
) -> None:
    path, report = recording
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        snapshots = {info.events: info.state_hash for info in session.snapshots()}
        replayed = hashes_along(session, TARGETS)
        assert session.source.memory()["checkpoints"] == 0 and not session.source.host.drivers
        assert replayed[64] == snapshots[64]
        session.goto("end")
        assert session.state_hash() == report["state_hash"]
    with Session.open(path, launch=TEST_SCRIPTS) as session, session.with_values():
        assert hashes_along(session, TARGETS) == replayed  # the ranks re-executed: the same worlds
        assert session.source.memory()["checkpoints"] >= 1


def test_a_seek_needs_no_script_and_a_tensor_then_says_it_does(
    recording: tuple[Path, dict[str, Any]],
) -> None:
    path, _report = recording
    with Session.open(path, launch=TEST_SCRIPTS) as named:
        named.goto_event(150)
        expected = named.state_hash()
    with Session.open(path) as session:  # no script named: nothing of the user's may run
        session.goto_event(150)
        assert session.state_hash() == expected
        # a 10-step run keeps its last state only (state_pull.py): the 6th is digests
        while session.world.nodes["r0"].get("state_step") != 6:
            session.step()
        assert isinstance(session.world.nodes["r0"]["grads"]["0.weight"], ElidedArray)
        with pytest.raises(ElidedError):
            session.read_values(lambda: summarize(session.world.nodes["r0"]["grads"]))


def test_a_command_that_reads_a_tensor_rebuilds_its_values(recording: tuple[Path, dict[str, Any]]) -> None:
    path, _report = recording
    with Session.open(path, launch=TEST_SCRIPTS) as session, session.with_values():
        session.goto_event(150)
        live = np.array(session.world.nodes["r1"]["grads"]["0.weight"])
    with open_context(str(path)) as context:
        context.session.launch = TEST_SCRIPTS  # what --script does on the command line
        run_line("goto #150", context)
        state_step = context.session.world.nodes["r1"]["state_step"]
        assert isinstance(context.session.world.nodes["r1"]["grads"]["0.weight"], ElidedArray), state_step
        printed = run_line("print nodes/r1/grads/0.weight", context)
        rebuilt = context.session.world.nodes["r1"]["grads"]["0.weight"]
        assert isinstance(rebuilt, np.ndarray) and np.array_equal(rebuilt, live)
        assert printed.entries and "float32" in printed.entries[0].summary


def test_a_state_too_large_to_rebuild_stays_digests_and_the_command_says_why(
    recording: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # bench torch's 10M-parameter model (160 MB a rank and step): five rebuilds pulled every rank's
    # state into every world they kept and the kernel killed the process past 10 GB
    from timetravel.torch.world import state_pull

    monkeypatch.setattr(state_pull, "REBUILD_STEP_BYTES_MAX", 64)
    path, _report = recording
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        session.goto_event(150)
        assert isinstance(session.world.nodes["r1"]["grads"]["0.weight"], ElidedArray)
        with pytest.raises(ElidedError, match=r"not rebuilt: \d+ bytes of state is above the 64 bytes"):
            session.read_values(lambda: np.array(session.world.nodes["r1"]["grads"]["0.weight"]))


def test_tensors_in_flight_are_digests_and_rebuilt_bit_for_bit(gpt_recording: Path) -> None:
    with Session.open(gpt_recording, launch=TEST_SCRIPTS) as session:
        held: list[Any] = []
        for target in range(1, session.end.events):
            session.goto_event(target)
            held = _large_results(session)
            if held:
                break
        assert held and all(isinstance(output, ElidedArray) for output in held)
        digests = [output.digest for output in held]
        with session.with_values():
            rebuilt = _large_results(session)
        assert all(isinstance(output, np.ndarray) for output in rebuilt)
        assert [array_digest(output) for output in rebuilt] == digests


def _large_results(session: Session) -> list[Any]:
    results = session.world.nodes["c10d"]["results"].values()
    return [output for result in results for output in result["outputs"] if output.nbytes > 4096]


def test_a_recording_without_a_journal_is_re_executed_with_its_ranks(
    recording: tuple[Path, dict[str, Any]],
) -> None:
    path, _report = recording
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        expected = hashes_along(session, TARGETS)
    with Session.open(path, launch=TEST_SCRIPTS) as session:
        session.reader.catalog.journals.clear()  # as a recording whose JOURNAL frames were lost
        assert hashes_along(session, TARGETS) == expected
        assert session.source.memory()["checkpoints"] >= 1  # the ranks ran


def test_a_branch_with_a_setting_from_a_world_holding_digests_runs(gpt_recording: Path) -> None:
    # the cursor's world, seeked from the journal, holds its tensors in flight as digests; a branch
    # that changes a setting copies it, and the copy could no longer be checked against the recorded
    # history it came from ("rebuilt another world than the recorded one", bench torch's branch)
    from timetravel.explore.branching import branch

    with Session.open(gpt_recording, launch=TEST_SCRIPTS) as session:
        for target in range(1, session.end.events):
            session.goto_event(target)
            if _large_results(session):
                break
        assert any(isinstance(output, ElidedArray) for output in _large_results(session))
        made = branch(session, None, {"settings": ["reduce_order=arrival"]})
        assert made.outcome == "pass", made.failure
