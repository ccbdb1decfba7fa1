"""Recordings the TUI's tests open: a failing needle seed, a fabric run with GPU streams (and a
branch written the way the explore engine writes one), and a fabric run that fails on a race."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.fabric_example import SCENARIO as FABRIC_EXAMPLE
from timetravel.explore.session import Session
from timetravel.recording import Recorder, RecordingWriter, record_run
from timetravel.recording.format import FrameType
from timetravel.scenarios import get_scenario
from timetravel.scenarios.dp_training.params import DEMO_SEED
from timetravel.sim.scenario import Scenario

NEEDLE_SEED = 1
FABRIC_SEED = 3
FABRIC_STEPS = 8
BRANCH_FORK_EVENT = 200


def record(path: Path, scenario: Scenario, settings: dict[str, Any], seed: int) -> dict[str, Any]:
    report, _world = record_run(
        scenario, scenario.resolve_config(settings), seed, path, snapshot_every_events=64
    )
    return report


def add_branch(path: Path, scenario: Scenario, name: str, at_event: int, branch_key: int) -> dict[str, Any]:
    """Append branch ``name`` forked from main after ``at_event`` with a new branch key, as the
    explore engine writes one (a BRANCH frame, then a Recorder on the forked world)."""
    with Session.open(path, scenario=scenario) as session:
        session.goto(f"#{at_event}")
        world = session.world_copy()
    world.branch_key = branch_key
    writer = RecordingWriter.append(path)
    writer.frame(
        FrameType.BRANCH,
        {
            "name": name,
            "parent": "main",
            "at_events": at_event,
            "at_ns": world.t_ns,
            "changes": {"branch_key": branch_key},
        },
    )
    recorder = Recorder(scenario, world, path, snapshot_every_events=64, branch=name, writer=writer)
    return recorder.finish(recorder.run())


@pytest.fixture(scope="session")
def needle_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("tui") / "needle.ttr"
    return path, record(path, get_scenario("needle"), {}, NEEDLE_SEED)


@pytest.fixture(scope="session")
def fabric_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """fabric_example, 8 ranks, FABRIC_STEPS steps, and a branch b1 with branch key 1."""
    path = tmp_path_factory.mktemp("tui") / "fabric.ttr"
    report = record(path, FABRIC_EXAMPLE, {"steps": FABRIC_STEPS}, FABRIC_SEED)
    add_branch(path, FABRIC_EXAMPLE, "b1", BRANCH_FORK_EVENT, 1)
    return path, report


@pytest.fixture(scope="session")
def race_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path = tmp_path_factory.mktemp("tui") / "race.ttr"
    return path, record(path, FABRIC_EXAMPLE, {"bug": "missing_wait"}, FABRIC_SEED)


STORY_FAILURE_NS = 77_022_955


@pytest.fixture
def story(tmp_path: Path) -> Path:
    """needle seed 0 with six decoys, recorded afresh for each test (branching appends to the
    file): f4 drops w3's ack at 76 ms, w3 restarts and applies the resent round twice, and the
    leader fails it at 77.022955 ms."""
    path = tmp_path / "needle-0.ttr"
    report = record(path, get_scenario("needle"), {"decoys": 6}, 0)
    assert report["failure"]["t_ns"] == STORY_FAILURE_NS and report["failure"]["node"] == "w3"
    return path


DEMO_FAULT_AFTER_NS = 950_000_000
DEMO_FAULT_BEFORE_NS = 1_000_000_000
"""The demo's root-cause fault starts in this window (dp_training's demo definition)."""


@pytest.fixture(scope="session")
def demo_recording(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """dp_training's demo preset at its own seed, recorded as ``run --record`` does."""
    scenario = get_scenario("dp_training")
    path = tmp_path_factory.mktemp("tui") / "dp_training-demo.ttr"
    report, _world = record_run(scenario, scenario.resolve_config({"preset": "demo"}), DEMO_SEED, path)
    assert report["outcome"] == "fail"
    return path


@pytest.fixture
def demo(demo_recording: Path, tmp_path: Path) -> Path:
    """A copy of the demo recording for one test (branching appends to the file)."""
    path = tmp_path / demo_recording.name
    shutil.copyfile(demo_recording, path)
    return path
