"""Rewinding a recording of the user's own torch script: fork checkpoints of the rank processes.

With tensors' values wanted (``Session.with_values``: what a command that reads a tensor asks for),
a seek restores the World's snapshot and resumes the ranks from a forked checkpoint taken there
(or re-executes from the start when none is kept); every re-executed event is checked against the
recorded hash chain, so a resumed rank that computed one different bit fails these tests. Seeks that
need no values re-execute from the recording's journal without any rank (tests/test_torch_journal.py).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch  # noqa: F401  (the dev install has it: CI must fail, not skip, without it)
from torch_launch import TEST_SCRIPTS
from world_sources import hashes_along

from timetravel.explore import Session
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.torch.world.specs import launch_naming, released

ROOT = Path(__file__).resolve().parent.parent
DDP_MLP = ROOT / "docs" / "examples" / "torch" / "ddp_mlp.py"
THREADS = ROOT / "tests" / "torch_scripts" / "thread_keeper.py"


def record(path: Path, script: Path, args: str, nproc: int = 3, seed: int = 5) -> dict:
    launch = launch_naming([str(script)])
    scenario = get_scenario("torch")
    config = scenario.resolve_config(
        [f"script={script}", f"nproc={nproc}", f"args={args}", "rank_output=quiet"]
    )
    report, world = record_run(
        scenario, config, seed, path, snapshot_every_events=64, force=True, launch=launch
    )
    report["final_hash"] = world.state_hash()
    return report


@pytest.fixture(scope="module")
def ddp_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("rewind") / "ddp.ttr"
    return path, record(path, DDP_MLP, "--steps 10")


def test_seeks_back_and_forth_resume_checkpoints_bit_for_bit(ddp_recording: tuple[Path, dict]) -> None:
    path, report = ddp_recording
    assert report["outcome"] == "pass"
    with Session.open(path, launch=TEST_SCRIPTS) as session, session.with_values():
        snapshots = {info.events: info.state_hash for info in session.snapshots()}
        forward = hashes_along(session, [70, 140, 200])
        assert session.source.memory()["checkpoints"] >= 3  # 64, 128, 192 (and where seeks stopped)
        backward = hashes_along(session, [200, 140, 70])
        assert backward == forward
        session.goto_event(130)
        assert session.last_replay_events == 2  # from the checkpoint at #128, not from the start
        session.goto_event(128)
        assert session.state_hash() == snapshots[128]
        session.goto("end")
        assert session.state_hash() == report["final_hash"]
        session.goto_event(150)
        assert session.position.events == 150, session.world.failures
        session.back(10)
        assert session.position.events == 140 and session.state_hash() == forward[140]


def test_ranks_that_ran_ahead_are_forked_blocked_and_a_kept_world_restores_the_recorded_one(
    ddp_recording: tuple[Path, dict],
) -> None:
    """Re-execution sends a result when it is released, so at a snapshot a rank may hold a result its
    poll has not handed over: it is read until it blocks, and what it sent goes into the checkpoint."""
    path, _report = ddp_recording
    with Session.open(path, launch=TEST_SCRIPTS) as session, session.with_values():
        manifests = {info.events: info for info in session.snapshots_info if not info.final}
        target = session.end.events - 1
        session.goto_event(target)  # through every snapshot before it: a checkpoint at each
        kept_at_snapshots = [kept for kept in session.source.shared.kept if kept.world is not None]
        passed = [events for events in manifests if 0 < events < target]  # #0: nothing ran there yet
        assert len(kept_at_snapshots) >= len(passed), (sorted(manifests), target)
        ahead = 0
        for kept in kept_at_snapshots:
            world = kept.world
            assert world is not None
            for rank in range(world.nodes["c10d"]["ranks"]):
                state = world.nodes[f"r{rank}"]
                ran_ahead = state["status"] == "waiting" and released(world, rank) > state["delivered"]
                assert (rank in kept.ranks.inbox) == ran_ahead
                if ran_ahead:
                    assert kept.ranks.inbox[rank][-1]["kind"] in ("wait", "exit")
                    ahead += 1
            manifest = manifests[kept.events]
            restored = session.source.restore(manifest)
            assert restored is not world and restored.state_hash() == manifest.state_hash
            assert session.reader.restore(manifest, full_check=True).state_hash() == manifest.state_hash
        assert ahead, "no snapshot fell between a result's release and its poll: the test tests nothing"
        for events in sorted(manifests)[1:]:
            session.goto_event(events)
            assert session.state_hash() == manifests[events].state_hash
            onward = min(events + 3, session.end.events - 1)
            session.goto_event(onward)  # the resumed ranks (and their kept messages) run on
            assert session.position.events == onward, session.world.failures


def test_a_killed_checkpoint_is_rebuilt_by_re_execution(ddp_recording: tuple[Path, dict]) -> None:
    path, _report = ddp_recording
    with Session.open(path, launch=TEST_SCRIPTS) as session, session.with_values():
        expected = hashes_along(session, [100, 180])[180]
        for kept in session.source.shared.kept:
            for checkpoint in kept.ranks.ranks.values():
                os.kill(checkpoint.pid, signal.SIGKILL)  # the user, or the OOM killer
        session.goto_event(60)
        session.goto_event(180)
        assert session.state_hash() == expected
        assert session.source.memory()["checkpoints"] >= 1


def test_closing_the_session_leaves_no_process_behind(ddp_recording: tuple[Path, dict]) -> None:
    path, _report = ddp_recording
    with Session.open(path, launch=TEST_SCRIPTS) as session, session.with_values():
        session.goto_event(150)
        pids = [c.pid for kept in session.source.shared.kept for c in kept.ranks.ranks.values()]
        assert pids
    for pid in pids:
        assert _ends_within(pid, polls=500), f"checkpoint {pid} outlived its session"


def _ends_within(pid: int, polls: int) -> bool:
    """SIGKILL is delivered asynchronously: give the kernel up to ``polls`` x 10 ms to end it."""
    import select

    for _ in range(polls):
        if _is_zombie(pid):
            return True
        select.select([], [], [], 0.01)
    return False


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] in ("Z", "X")
    except (OSError, IndexError):
        return True


COLD_SEEK = """
import json, sys
from timetravel.explore import Session
from timetravel.torch.world.specs import launch_naming
launch = launch_naming([sys.argv[2]])
with Session.open(sys.argv[1], launch=launch) as session:
    session.goto_event(int(sys.argv[3]))
    replayed = session.state_hash()
    with session.with_values():
        print(json.dumps({"hash": session.state_hash(), "replayed": replayed, "memory": session.source.memory()}))
"""


def test_a_new_process_rebuilds_checkpoints_and_reaches_the_same_bits(
    ddp_recording: tuple[Path, dict],
) -> None:
    path, _report = ddp_recording
    with Session.open(path, launch=TEST_SCRIPTS) as session, session.with_values():
        session.goto_event(170)
        here = session.state_hash()
    for hash_seed in ("0", "4242"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        completed = subprocess.run(
            [sys.executable, "-c", COLD_SEEK, str(path), str(DDP_MLP), "170"],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            check=True,
        )
        cold = json.loads(completed.stdout.strip().splitlines()[-1])
        assert cold["hash"] == here and cold["replayed"] == here  # from the journal, and re-executed
        assert cold["memory"]["checkpoints"] >= 2  # kept on the way, for the next seek


@pytest.mark.parametrize(
    ("mode", "reasons"),
    # share_memory_() maps /dev/shm and, depending on what torch set up before, starts a helper
    # thread: the refusal names whichever it meets first
    [("thread", ("threads",)), ("shared", ("shared memory", "threads"))],
)
def test_a_rank_that_cannot_be_forked_is_re_executed_instead(
    tmp_path: Path, mode: str, reasons: tuple[str, ...]
) -> None:
    path = tmp_path / f"{mode}.ttr"
    report = record(path, THREADS, mode, nproc=2)
    assert report["outcome"] == "pass", report["failure"]
    with Session.open(path, launch=TEST_SCRIPTS) as session, session.with_values():
        session.goto("end")
        end = session.position.events
        session.goto_event(end // 2)
        middle = session.state_hash()
        memory = session.source.memory()
        assert memory["checkpoints"] == 0
        assert any(reason in (memory["refused"] or "") for reason in reasons), memory["refused"]
        session.goto_event(end - 1)
        session.goto_event(end // 2)
        assert session.state_hash() == middle
