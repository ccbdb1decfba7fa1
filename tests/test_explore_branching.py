"""Branches: fork a recording at T with changes, store the future in the same file, read it back."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
from explore_scenarios import SCENARIO as COIN
from explore_scenarios import face

from timetravel.explore import Session
from timetravel.explore.branch_tree import branch_tree
from timetravel.explore.branching import BranchChanges, branch
from timetravel.explore.fault_changes import FaultSpecError, parse_fault_edit, parse_fault_spec
from timetravel.explore.tracks import shared_events
from timetravel.explore.verify_replay import replay_session
from timetravel.explore.work import ExploreError
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.sim import Simulation
from timetravel.sim.runner import build_world
from timetravel.sim.scenario import ConfigError

NEEDLE_SETTINGS = {"decoys": 5, "rounds": 12, "workers": 4}
MS = 1_000_000


@pytest.fixture(scope="module")
def needle_source(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, dict[str, Any], list[dict[str, Any]]]:
    """needle with the planted drop+restart on one worker, recorded with a snapshot every 64 events."""
    scenario = get_scenario("needle")
    config = scenario.resolve_config(NEEDLE_SETTINGS)
    path = tmp_path_factory.mktemp("needle") / "needle.ttr"
    report, world = record_run(scenario, config, 0, path, snapshot_every_events=64)
    return path, report, [dict(record) for record in world.faults]


@pytest.fixture
def needle(needle_source: tuple[Path, dict[str, Any], list[dict[str, Any]]], tmp_path: Path) -> Any:
    source, report, faults = needle_source
    path = tmp_path / "needle.ttr"
    shutil.copy(source, path)
    return path, report, faults


def planted(faults: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (record,) = [record for record in faults if record["kind"] == kind]
    return record


# -- fault specs --------------------------------------------------------------------------------


def test_fault_spec_values_fields_and_params() -> None:
    record = parse_fault_spec(
        "kind=drop,target=r3,t_start=950,t_end=990.5ms,probability=0.5,count=2,kinds=grad|need"
    )
    assert record == {
        "kind": "drop",
        "target": "r3",
        "t_start": 950 * MS,
        "t_end": 990_500_000,
        "params": {"probability": 0.5, "count": 2, "kinds": ["grad", "need"]},
    }
    assert parse_fault_spec("kind=delay,target=r1,t_start=1s,t_end=null,delay_ns=50us")["params"] == {
        "delay_ns": 50_000
    }
    assert parse_fault_spec("kind=slow,target=r1,t_start=2", "us")["t_start"] == 2_000
    assert parse_fault_spec('{"kind": "crash", "target": "r2", "t_start": "5"}')["t_start"] == 5 * MS
    assert parse_fault_edit("f3:t_end=990ms,probability=0.25") == (
        "f3",
        {"params": {"probability": 0.25}, "t_end": 990 * MS},
    )


@pytest.mark.parametrize(
    "text, message",
    [
        ("kind=drop,target=r3", "give at least kind=, target= and t_start="),
        ("kind=drop,target=r3,t_start=soon", "t_start"),
        ("kind=drop,kind=slow,target=r1,t_start=1", "kind given twice"),
        ("kind=drop,target", "not key=value"),
        ("{x", "invalid JSON"),
    ],
)
def test_bad_fault_specs_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(FaultSpecError, match=message):
        parse_fault_spec(text)


@pytest.mark.parametrize("text", ["3:t_end=1", "f3", "f3:"])
def test_bad_fault_edits(text: str) -> None:
    with pytest.raises(FaultSpecError):
        parse_fault_edit(text)


# -- branches of needle ---------------------------------------------------------------------------


def test_a_branch_with_the_fix_passes_and_equals_a_straight_run(needle: Any) -> None:
    """bug=none from 19 ms (before the planted drop at 20 ms): the future passes, is stored as b1
    and replays bit for bit; its end state is that of a straight run switched to bug=none at 19 ms."""
    path, report, _faults = needle
    scenario = get_scenario("needle")
    with Session.open(path) as session:
        result = branch(session, "19ms", {"settings": ["bug=none"]})
        assert (result.name, result.parent, result.at_ns, result.outcome) == ("b1", "main", 19 * MS, "pass")
        assert result.changes == ("set bug=none",)
        assert [row.name for row in branch_tree(session.reader)] == ["main", "b1"]
    expected = build_world(scenario, report["config"], 0)
    simulation = Simulation(scenario, expected)
    simulation.run(until_ns=19 * MS)
    expected.config = {**expected.config, "bug": "none"}
    Simulation(scenario, expected).run()
    with Session.open(path, branch="b1") as stored:
        assert stored.goto("end").events == result.events == expected.events_processed
        assert stored.state_hash() == expected.state_hash()
        assert replay_session(stored).verified
    with Session.open(path) as main:
        assert main.goto("end").events == report["events"]
        assert main.state_hash() == report["state_hash"]


def test_branch_names_parents_and_branches_of_branches(needle: Any) -> None:
    path, _report, faults = needle
    restart = planted(faults, "restart")
    with Session.open(path) as session:
        first = branch(session, "19ms", {"branch_key": 7})
        named = branch(session, "#10", BranchChanges(drop_faults=(restart["id"],)), name="no-restart")
        nested = branch(session, "19.5ms", {"settings": ["bug=none"]}, parent="b1")
        assert (first.name, named.name, nested.name) == ("b1", "no-restart", "b2")
        assert nested.parent == "b1" and named.outcome == "pass"
        assert shared_events(session.reader, "b2", "b1") == session.reader.catalog.branches["b2"]["at_events"]
        assert shared_events(session.reader, "b2", "no-restart") == 10
        assert shared_events(session.reader, "b1", "b1") is None
        with pytest.raises(ExploreError, match="exists already"):
            branch(session, "19ms", {"branch_key": 1}, name="b1")
        with pytest.raises(ExploreError, match="branch name"):
            branch(session, "19ms", {"branch_key": 1}, name="no spaces")
        with pytest.raises(ExploreError, match="no branch 'b9'"):
            branch(session, "19ms", {"branch_key": 1}, parent="b9")
    with Session.open(path, branch="b2") as stored:
        assert replay_session(stored).verified


def test_a_new_branch_key_changes_only_the_future(needle: Any) -> None:
    """Choices after the fork come from the new key; the prefix is main's, event for event."""
    path, report, _faults = needle
    scenario = get_scenario("needle")
    with Session.open(path) as session:
        result = branch(session, "#40", {"branch_key": 5})
        fork_ns = session.reader.catalog.branches["b1"]["at_ns"]
    expected = build_world(scenario, report["config"], 0)
    Simulation(scenario, expected).run(max_events=40)
    assert expected.t_ns == fork_ns
    expected.branch_key = 5
    Simulation(scenario, expected).run()
    assert result.events == expected.events_processed
    with Session.open(path, branch="b1") as stored:
        stored.goto("end")
        assert stored.state_hash() == expected.state_hash()


@pytest.mark.parametrize(
    "at, changes, message",
    [
        ("19ms", {}, "a branch needs a change"),
        ("19ms", {"settings": ["workers=3"]}, "cannot change in a branch \\(branchable: bug\\)"),
        ("19ms", {"drop_faults": ["f99"]}, "no fault 'f99'"),
        ("19ms", {"add_faults": ["kind=drop,target=w1,t_start=20"]}, "does not use the fabric"),
        ("30ms", {"branch_key": 1}, "has already failed there"),
        ("19ms", {"branch_key": -1}, "--branch-seed must be"),
        ("19ms", {"colour": 1}, "unknown branch change"),
    ],
)
def test_branches_refuse_what_cannot_be(needle: Any, at: str, changes: dict[str, Any], message: str) -> None:
    path, _report, _faults = needle
    size = path.stat().st_size
    with Session.open(path) as session, pytest.raises(ExploreError, match=message):
        branch(session, at, changes)
    assert path.stat().st_size == size


def test_an_unknown_config_key_is_a_config_error(needle: Any) -> None:
    path, _report, _faults = needle
    with Session.open(path) as session, pytest.raises(ConfigError, match="unknown config key 'colour'"):
        branch(session, "19ms", {"settings": ["colour=red"]})


def test_dropping_a_needle_fault_removes_its_pending_event(needle: Any) -> None:
    path, _report, faults = needle
    restart = planted(faults, "restart")
    with Session.open(path) as session:
        result = branch(session, "19ms", {"drop_faults": [restart["id"]]})
    assert result.outcome == "pass"
    with Session.open(path, branch="b1") as stored:
        stored.goto("19ms")
        assert restart["id"] not in [record["id"] for record in stored.world.faults]
        assert not [
            event
            for event in stored.world.queue
            if event.kind == "fault" and event.payload["id"] == restart["id"]
        ]


def test_a_stopped_branch_keeps_what_it_recorded(needle: Any) -> None:
    path, _report, _faults = needle
    with Session.open(path) as session:
        result = branch(session, "#1", {"branch_key": 2}, should_stop=lambda: True)
        assert result.outcome == "cancelled"
        assert branch_tree(session.reader)[1].outcome == "unknown"
    with Session.open(path, branch="b1") as stored:
        assert stored.fork_events == 1


# -- coin: outcomes computed from the choice streams -----------------------------------------------


@pytest.fixture(scope="module")
def coin_seed() -> int:
    """The first seed whose recorded coin shows an odd face (so main fails)."""
    return next(seed for seed in range(100) if face(seed, 0) == 1)


def test_coin_branches_fail_exactly_when_their_own_draw_is_odd(tmp_path: Path, coin_seed: int) -> None:
    path = tmp_path / "coin.ttr"
    report, _world = record_run(COIN, COIN.resolve_config({}), coin_seed, path, snapshot_every_events=64)
    assert report["failure"]["signature"] == "assertion:coin.end"
    with Session.open(path, scenario=COIN) as session:
        for key in range(1, 6):
            before = branch(session, "9ms", {"branch_key": key})
            assert before.outcome == ("fail" if face(coin_seed, key) == 1 else "pass")
        after = branch(session, "11ms", {"branch_key": 1})
        assert after.outcome == "fail"
        assert branch(session, "9ms", {"settings": ["strict=on"]}).outcome == "fail"
