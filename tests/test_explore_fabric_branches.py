"""Branches that drop, add and edit the fabric's faults (fabric_example: a bit flip and a drop window)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from fabric_example import SCENARIO

from timetravel.explore import Session
from timetravel.explore.branching import branch
from timetravel.explore.divergence import first_divergence
from timetravel.explore.verify_replay import replay_session
from timetravel.explore.work import ExploreError
from timetravel.fabric.edit import pending_phases
from timetravel.recording import record_run

US = 1_000
FAULTS = [
    {
        "kind": "corrupt",
        "target": "r2",
        "t_start": "100us",
        "params": {"buffer": "weights", "element": 3, "bit": 30},
    },
    {"kind": "drop", "target": "r1", "t_start": "50us", "t_end": "150us"},
]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    config = SCENARIO.resolve_config([f"faults={json.dumps(FAULTS)}", "steps=4"])
    path = tmp_path_factory.mktemp("fabric") / "flip.ttr"
    report, _world = record_run(SCENARIO, config, 0, path, snapshot_every_events=64)
    return path, report


@pytest.fixture
def recording(source: tuple[Path, dict[str, Any]], tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    path = tmp_path / "flip.ttr"
    shutil.copy(source[0], path)
    return path, source[1]


def test_the_recorded_run_fails_on_the_flipped_weights(recording: tuple[Path, dict[str, Any]]) -> None:
    _path, report = recording
    assert report["failure"]["signature"] == "divergence:example.end"
    assert report["failure"]["node"] == "r2"


def test_dropping_the_bit_flip_before_it_fires_passes_and_diverges_at_it(recording: Any) -> None:
    """Drops are survivable in this scenario (pulls recover them), so without the flip the run
    passes; the first divergence is the flip's own fault event on r2, kept as a no-op."""
    path, _report = recording
    with Session.open(path, scenario=SCENARIO) as session:
        result = branch(session, "90us", {"drop_faults": ["f1"]})
        found = first_divergence(session, "main", "b1")
    assert result.outcome == "pass"
    assert found is not None
    assert (found.t_ns, found.node, found.kind, found.seq_a) == (100 * US, "r2", "fault", found.seq_b)
    assert found.reason == "the state of r2 differs after it"
    assert "nodes/r2/buffers/weights" in [change["path"] for change in found.changes]
    with Session.open(path, scenario=SCENARIO, branch="b1") as stored:
        assert replay_session(stored).verified


def test_editing_a_pending_fault_moves_its_events(recording: Any) -> None:
    path, _report = recording
    with Session.open(path, scenario=SCENARIO) as session:
        result = branch(session, "90us", {"edit_faults": ["f1:t_start=400us"]})
    assert result.changes[0].startswith("edit-fault f1 corrupt r2 400000..None ns")
    with Session.open(path, scenario=SCENARIO, branch="b1") as stored:
        stored.goto("90us")
        assert [record["t_start"] for record in stored.world.faults if record["id"] == "f1"] == [400 * US]
        assert [
            event.t for event in stored.world.queue if event.kind == "fault" and event.payload[0] == "f1"
        ] == [400 * US]
        assert replay_session(stored).verified


def test_editing_an_active_fault_rebuilds_its_rule(recording: Any) -> None:
    path, _report = recording
    with Session.open(path, scenario=SCENARIO) as session:
        branch(session, "90us", {"edit_faults": ["f2:t_end=120us,probability=0.5"]})
    with Session.open(path, scenario=SCENARIO, branch="b1") as stored:
        stored.goto("90us")
        rule = stored.world.fabric["message_rules"]["f2"]
        assert (rule["probability"], rule["t_end_ns"]) == (0.5, 120 * US)
        assert pending_phases(stored.world, "f2") == ["end"]
        assert [
            event.t for event in stored.world.queue if event.kind == "fault" and event.payload[0] == "f2"
        ] == [120 * US]
        stored.goto("130us")
        assert "f2" not in stored.world.fabric["message_rules"]


@pytest.mark.parametrize(
    "at, edit, message",
    [
        ("90us", "f2:t_start=60us", "fault f2: it started at 50000 ns; t_start cannot change now"),
        ("90us", "f2:t_end=80us", "fault f2: t_end \\(80000 ns\\) is before now \\(90000 ns\\)"),
        ("200us", "f2:t_end=300us", "fault f2: it ended at 150000 ns, before the branch; drop it instead"),
        ("120us", "f1:bit=3", "fault f1: its bit flip happened at its start"),
        ("90us", "f1:t_start=80us", "fault f1: t_start \\(80000 ns\\) is before now"),
        ("90us", "f9:t_end=1ms", "no fault 'f9'"),
        ("90us", "f1:colour=red", "corrupt has no parameter 'colour'"),
    ],
)
def test_edits_that_contradict_what_happened_are_refused(
    recording: Any, at: str, edit: str, message: str
) -> None:
    path, _report = recording
    with Session.open(path, scenario=SCENARIO) as session, pytest.raises(ExploreError, match=message):
        branch(session, at, {"edit_faults": [edit]})


def test_an_added_fault_gets_the_next_id_and_diverges_where_it_starts(recording: Any) -> None:
    """Dropping every gradient r3 sends, forever (pulls included), leaves its peers waiting: a hang."""
    path, _report = recording
    with Session.open(path, scenario=SCENARIO) as session:
        result = branch(session, "90us", {"add_faults": ["kind=drop,target=r3,t_start=95us,kinds=grad"]})
        found = first_divergence(session, "main", "b1")
        with pytest.raises(ExploreError, match="starts before now"):
            branch(session, "90us", {"add_faults": ["kind=drop,target=r3,t_start=80us"]})
        with pytest.raises(ExploreError, match="target must be a node name"):
            branch(session, "90us", {"add_faults": ["kind=drop,target=r99,t_start=95us"]})
    assert result.changes == (
        "add-fault f3 drop r3 95000..None ns {'direction': 'out', 'kinds': ['grad'], 'probability': 1.0}",
    )
    assert result.failure is not None and result.failure["signature"] == "hang:example.retry"
    assert found is not None
    assert (found.t_ns, found.node, found.kind, found.seq_a, found.event_a) == (
        95 * US,
        "r3",
        "fault",
        None,
        None,
    )
    with Session.open(path, scenario=SCENARIO, branch="b1") as stored:
        assert replay_session(stored).verified
