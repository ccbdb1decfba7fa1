"""Seeking back to where the cursor was (explore/parked_worlds.py).

What a user relies on: going back and forth between moments gives, at every move, bit for bit the
world a restore and a re-execution give (state hash and position), while a seek back into a quiet
interval the Session has been in re-executes nothing; the kept worlds are bounded and forgotten
when a re-execution diverges.
"""

from __future__ import annotations

import itertools
import random
from pathlib import Path
from typing import Any

import pytest
from scenario_fixtures import NONDETERMINISTIC
from world_sources import record_tree32, reference_session

from timetravel.explore import Position, ReplayDivergence, Session
from timetravel.explore.parked_worlds import PARKED_WORLDS_MAX, ParkedWorlds, quiet_until
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.sim.world import World


@pytest.fixture(scope="module")
def training(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    return record_tree32(tmp_path_factory.mktemp("seek-parked"))


def test_back_and_forth_gives_the_world_a_restore_gives(training: tuple[Path, Any]) -> None:
    path, report = training
    rng = random.Random(5)
    places = [rng.randrange(0, report["t_end_ns"]) for _ in range(5)]
    moves: list[Any] = [rng.choice(places) - rng.randrange(0, 3) * 1000 for _ in range(40)]
    moves[10:10] = ["#40", places[0], "end", places[1], "start", places[1]]
    rewound = 0
    with Session.open(path) as session, reference_session(path) as reference:
        for move in moves:
            assert session.goto(move) == reference.goto(move), move
            assert session.world.state_hash() == reference.world.state_hash(), move
            rewound += session.last_replay_events == 0 and reference.last_replay_events > 0
            assert len(session._parked) <= PARKED_WORLDS_MAX
            # stepping on from a world that was parked runs the recorded events as from any other
            if move == places[1]:
                assert session.step(25) == reference.step(25)
                assert session.world.state_hash() == reference.world.state_hash()
    assert rewound >= 10  # most of these seeks went back to a world the session had been in


def test_a_seek_back_into_a_quiet_interval_runs_nothing(training: tuple[Path, Any]) -> None:
    path, _report = training
    with Session.open(path) as session, reference_session(path) as reference:
        # a quiet interval: the longest gap between two recorded events
        times = [event.t_ns for event in session.events_around(1, before=1, after=4000)]
        gap, start = max((later - earlier, earlier) for earlier, later in itertools.pairwise(times))
        assert gap > 1000
        late, early = start + gap - 1, start + gap // 2
        session.goto(late)
        session.goto(0)  # elsewhere: the quiet world is parked
        assert session.goto(early) == reference.goto(early)
        assert session.last_replay_events == 0
        assert session.world.state_hash() == reference.world.state_hash()
        assert session.goto(start) == reference.goto(start)  # the last event's own time: still quiet
        assert session.last_replay_events == 0
        assert session.world.state_hash() == reference.world.state_hash()
        kept = session.world
        assert session.goto(start - 1) == reference.goto(start - 1)  # before it: a real seek
        assert session.world is not kept
        assert session.world.state_hash() == reference.world.state_hash()


def test_the_kept_worlds_are_bounded_and_none_is_kept_for_another_source(training: tuple[Path, Any]) -> None:
    path, report = training
    with Session.open(path) as session:
        for index in range(6):
            session.goto(report["t_end_ns"] * index // 6)
        assert len(session._parked) == PARKED_WORLDS_MAX
    with reference_session(path) as reference:
        for index in range(6):
            reference.goto(report["t_end_ns"] * index // 6)
        assert len(reference._parked) == 0


def test_a_divergence_forgets_the_kept_worlds(tmp_path: Path) -> None:
    path = tmp_path / "nondeterministic.ttr"
    record_run(NONDETERMINISTIC, NONDETERMINISTIC.resolve_config({}), 1, path, snapshot_every_events=512)
    with Session.open(path, scenario=NONDETERMINISTIC) as session:
        session.goto("#3")  # the recorded events up to #4 re-execute as recorded
        session.goto("start")
        assert len(session._parked) >= 1
        with pytest.raises(ReplayDivergence):
            session.goto("#3000")
        assert len(session._parked) == 0


@pytest.mark.parametrize(
    ("scenario_name", "settings", "until_ns"),
    [("gossip", {"nodes": 16, "rumors": 4}, 1_500_000), ("pingpong", {}, 1_000_001)],
)
def test_a_seek_past_the_last_event_of_a_run_stopped_at_until_reads_the_target(
    scenario_name: str, settings: dict[str, Any], until_ns: int, tmp_path: Path
) -> None:
    """A run stopped at --until ends later than its last event. goto(t) between the two reads t
    whether the cursor comes from the start (a re-execution, which stops at the last recorded event
    with the clock there: it read the last event's time before the fix) or from the end (the end's
    world with its clock set back)."""
    scenario = get_scenario(scenario_name)
    path = tmp_path / "until.ttr"
    record_run(scenario, scenario.resolve_config(settings), 1, path, until_ns=until_ns)
    with Session.open(path) as from_end, reference_session(path) as from_start:
        end = from_end.end
        last = from_end.event(end.events)
        assert last is not None and last.t_ns < end.t_ns - 1
        for target in (last.t_ns, (last.t_ns + end.t_ns) // 2, end.t_ns - 1):
            from_end.goto("end")
            from_start.goto("start")
            assert from_end.goto(target) == from_start.goto(target) == Position("main", end.events, target)
            assert from_end.state_hash() == from_start.state_hash()


def _world(t_ns: int, events: int, failures: list[Any] | None = None) -> World:
    world = World.__new__(World)
    world.t_ns, world.events_processed, world.failures = t_ns, events, failures or []
    return world


def test_quiet_until_reads_the_last_events_time() -> None:
    times = {1: 100, 2: 200}
    at = times.get
    assert quiet_until(_world(500, 2), 300, at)
    assert quiet_until(_world(500, 2), 200, at)  # the last event's own time
    assert not quiet_until(_world(500, 2), 199, at)  # before the last event
    assert not quiet_until(_world(500, 2), 500, at) and not quiet_until(_world(500, 2), 600, at)
    assert not quiet_until(_world(500, 3), 300, at)  # the last event is not known
    assert not quiet_until(_world(500, 2, [{"kind": "nan"}]), 300, at)
    assert quiet_until(_world(500, 0), 0, at)


def test_parked_worlds_keep_the_most_recent_and_hand_each_out_once() -> None:
    parked = ParkedWorlds(count_max=2)
    worlds = [_world(100 * index, index) for index in range(1, 4)]
    for world in worlds:
        parked.park(world, {"n": b"d" * 16})
    parked.park(worlds[2], {})  # already kept: not twice
    parked.park(_world(900, 9, [{"kind": "nan"}]), {})  # a world with failures is never kept
    assert len(parked) == 2
    taken = parked.take(lambda world: world.events_processed >= 2)
    assert taken is not None and taken[0] is worlds[2] and taken[1] == {"n": b"d" * 16}
    assert parked.take(lambda world: world.events_processed == 1) is None  # the oldest went first
    assert len(parked) == 1
