"""The Session: seeking equals a straight run, event numbers, the end, and replay verification."""

from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Any

import pytest
from branch_writing import append_branch, world_at
from scenario_fixtures import FLOATS, NONDETERMINISTIC, TRESPASSER

from timetravel.explore import ReplayDivergence, Session
from timetravel.explore import replay as replay_module
from timetravel.explore.verify_replay import replay_session
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.sim import Simulation
from timetravel.sim.event import Event
from timetravel.sim.runner import build_world
from timetravel.sim.scenario import Scenario
from timetravel.sim.timefmt import TimeFormatError
from timetravel.sim.world import World

SEEKS = 25


def straight(scenario: Scenario, config: dict[str, Any], seed: int, **run: Any) -> World:
    world = build_world(scenario, config, seed)
    Simulation(scenario, world).run(**run)
    return world


def test_goto_time_equals_a_straight_run_to_that_time(gossip_recording: tuple[Path, dict[str, Any]]) -> None:
    path, report = gossip_recording
    scenario = get_scenario("gossip")
    rng = random.Random(7)
    with Session.open(path) as session:
        for _ in range(SEEKS):
            t_ns = rng.randrange(0, report["t_end_ns"])
            position = session.goto(t_ns)
            expected = straight(scenario, report["config"], 3, until_ns=t_ns)
            assert (position.events, position.t_ns) == (expected.events_processed, t_ns)
            assert session.state_hash() == expected.state_hash()
            assert session.last_replay_events < 2 * 512


def test_goto_event_step_and_back_equal_a_straight_run(floats_recording: tuple[Path, dict[str, Any]]) -> None:
    path, report = floats_recording
    rng = random.Random(3)
    with Session.open(path, scenario=FLOATS) as session:
        for _ in range(SEEKS):
            number = rng.randrange(0, report["events"])
            assert session.goto(f"#{number}").events == number
            expected = straight(FLOATS, report["config"], 5, max_events=number)
            assert session.state_hash() == expected.state_hash()
            back = min(number, rng.randrange(1, 300))
            assert session.back(back).events == number - back
            assert session.step(back).events == number
            assert session.state_hash() == expected.state_hash()


def test_time_text_is_read_in_the_display_unit(gossip_recording: tuple[Path, dict[str, Any]]) -> None:
    path, report = gossip_recording
    with Session.open(path) as session:
        assert session.goto("3").t_ns == 3_000_000
        assert session.goto("2500us").t_ns == 2_500_000
        expected = straight(get_scenario("gossip"), report["config"], 3, until_ns=2_500_000)
        assert session.state_hash() == expected.state_hash()
        with pytest.raises(TimeFormatError):
            session.goto("#twelve")
        with pytest.raises(TimeFormatError):
            session.goto("soon")


def test_past_the_end_stops_at_the_end_and_before_the_start_at_the_start(
    gossip_recording: tuple[Path, dict[str, Any]],
) -> None:
    path, report = gossip_recording
    with Session.open(path) as session:
        end = session.goto(report["t_end_ns"] + 10**12)
        assert (end.events, end.t_ns) == (report["events"], report["t_end_ns"])
        assert session.state_hash() == report["state_hash"]
        assert session.world.failures[0]["signature"] == "assertion:gossip.coverage"
        assert session.goto(f"#{report['events'] + 50}") == end
        assert session.goto("end") == end
        start = session.goto(-5)
        assert (start.events, start.t_ns) == (0, 0)
        initial = build_world(get_scenario("gossip"), report["config"], 3)
        assert session.state_hash() == initial.state_hash()
        assert session.back(3).events == 0


def test_recorded_events_and_metrics(floats_recording: tuple[Path, dict[str, Any]]) -> None:
    path, report = floats_recording
    world = build_world(FLOATS, report["config"], 5)
    processed: list[Event] = []
    Simulation(FLOATS, world, on_chain_batch=lambda _f, events, _d: processed.extend(events)).run()
    processed.extend(world.chain_batch)
    with Session.open(path, scenario=FLOATS) as session:
        assert session.event(0) is None and session.event(report["events"] + 1) is None
        for number in (1, 2, 700, report["events"]):
            recorded = session.event(number)
            assert recorded is not None
            assert (recorded.t_ns, recorded.seq, recorded.node, recorded.kind) == tuple(
                processed[number - 1][:4]
            )
        session.goto("#700")
        around = session.events_around(before=3, after=2)
        assert [event.number for event in around] == [698, 699, 700, 701, 702]
        assert session.metric_names() == ["loss"]
        assert session.metric_series("loss") == world.metrics["loss"]
        assert [info.events for info in session.snapshots()][:3] == [0, 128, 256]


def test_a_nondeterministic_scenario_is_caught_and_classified(tmp_path: Path) -> None:
    path = tmp_path / "nondeterministic.ttr"
    config = NONDETERMINISTIC.resolve_config({})
    record_run(NONDETERMINISTIC, config, 1, path, snapshot_every_events=512)
    with Session.open(path, scenario=NONDETERMINISTIC) as session:
        report = replay_session(session)
        assert not report.verified
        assert report.cause == "determinism_bug"
        mismatch = report.first_mismatch
        assert mismatch is not None and mismatch["what"] == "event"
        assert mismatch["kind"] == "tick" and mismatch["event"] >= 5
        assert mismatch["recorded"]["t_ns"] != mismatch["replayed"]["t_ns"]
        with pytest.raises(ReplayDivergence) as caught:
            session.goto("#3000")
        assert caught.value.mismatch.cause == "determinism_bug"


def test_a_deterministic_recording_replays_verified(floats_recording: tuple[Path, dict[str, Any]]) -> None:
    path, report = floats_recording
    with Session.open(path, scenario=FLOATS) as session:
        result = replay_session(session)
    assert result.verified and result.first_mismatch is None and result.cause is None
    assert result.events == result.events_recorded == report["events"]
    assert result.snapshots_checked == report["recording"]["snapshots"] - 1
    assert result.outcome == result.recorded_outcome == "pass"


def test_a_mismatch_is_blamed_on_changed_code_or_platform_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "nondeterministic.ttr"
    record_run(NONDETERMINISTIC, NONDETERMINISTIC.resolve_config({"ticks": 300}), 1, path)
    monkeypatch.setattr(replay_module, "platform_fingerprint", lambda: "another-platform")
    with Session.open(path, scenario=NONDETERMINISTIC) as session:
        assert replay_session(session).cause == "platform"
    monkeypatch.setattr(replay_module, "code_fingerprint", lambda _module=None: "changed-code")
    with Session.open(path, scenario=NONDETERMINISTIC) as session:
        assert replay_session(session).cause == "code_changed"


def test_a_handler_that_writes_another_node_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "trespasser.ttr"
    report, _world = record_run(TRESPASSER, {}, 1, path, snapshot_every_events=64)
    assert any("copy-on-write check failed" in note for note in report["recording"]["notes"])
    with Session.open(path, scenario=TRESPASSER) as session:
        result = replay_session(session)
    assert not result.verified
    assert result.first_mismatch is not None and result.first_mismatch["what"] == "state"
    assert result.first_mismatch["node"] == "b"


@pytest.mark.slow
def test_goto_on_a_larger_gossip_recording(tmp_path: Path) -> None:
    size = os.environ.get("TIMETRAVEL_SLOW", "ci")
    nodes, rumors, seeks = (256, 60, 40) if size != "full" else (1024, 200, 200)
    scenario = get_scenario("gossip")
    config = scenario.resolve_config({"nodes": nodes, "rumors": rumors})
    path = tmp_path / "gossip.ttr"
    report, _world = record_run(scenario, config, 11, path)
    rng = random.Random(2)
    with Session.open(path) as session:
        for _ in range(seeks):
            t_ns = rng.randrange(0, report["t_end_ns"])
            session.goto(t_ns)
            assert session.state_hash() == straight(scenario, config, 11, until_ns=t_ns).state_hash()
        assert replay_session(session).verified


def test_a_branch_appended_to_the_recording_shares_the_prefix(
    gossip_recording: tuple[Path, dict[str, Any]], gossip_copy: Path
) -> None:
    """What the explore engine does for ``branch``: fork at #N with a new branch key, record the
    future into the same file; the branch then seeks through the parent's snapshots before the
    fork and its own after it."""
    _source, report = gossip_recording
    path = gossip_copy
    scenario = get_scenario("gossip")
    fork = 1500
    world = world_at(path, fork)
    world.branch_key = 1
    branch_end = append_branch(path, scenario, world, fork, changes={"branch_key": 1})

    expected_world = straight(scenario, report["config"], 3, max_events=fork)
    expected_world.branch_key = 1
    Simulation(scenario, expected_world).run()
    assert branch_end["state_hash"] == expected_world.state_hash()

    with Session.open(path, branch="b1") as branch:
        assert branch.fork_events == fork
        assert branch.snapshots()[0].events == 0
        assert any(info.events == fork for info in branch.snapshots())
        before = branch.goto("#1000")
        assert before.events == 1000
        assert branch.state_hash() == straight(scenario, report["config"], 3, max_events=1000).state_hash()
        assert branch.goto("end").events == branch_end["events"]
        assert branch.state_hash() == branch_end["state_hash"]
        after = fork + (branch_end["events"] - fork) // 2
        branch.goto(f"#{after}")
        replayed = straight(scenario, report["config"], 3, max_events=fork)
        replayed.branch_key = 1
        Simulation(scenario, replayed).run(max_events=after - fork)
        assert branch.state_hash() == replayed.state_hash()
        assert replay_session(branch).verified
    with Session.open(path) as main:
        assert main.goto("end").events == report["events"]
        assert main.state_hash() == report["state_hash"]
