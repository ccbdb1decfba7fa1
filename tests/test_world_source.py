"""The world-source seam (explore/world_source.py): a Session reaches its worlds only through it.

A scenario whose worlds own external processes (torch ranks) plugs in its own source with
``Scenario.world_source``; everything the debugger does must then restore and re-execute through
that source, or it would run a world without its processes. These tests plug in a source that
wraps the plain one and make every restore from the reader and every Simulation built outside
the source an error, then run each action over a Session.
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from timetravel.explore import Session
from timetravel.explore.branching import branch
from timetravel.explore.commands import CommandContext, run_line
from timetravel.explore.compare import compare, diff
from timetravel.explore.divergence import first_divergence
from timetravel.explore.fanout import fanout, likelihood
from timetravel.explore.perfetto import export_perfetto
from timetravel.explore.rerun import rerun
from timetravel.explore.search import find_first
from timetravel.explore.verify_replay import replay_session
from timetravel.explore.watchpoints import last_change
from timetravel.explore.world_source import RecordedWorlds
from timetravel.recording import record_run
from timetravel.recording.catalog import ManifestInfo
from timetravel.recording.reader import RecordingReader
from timetravel.scenarios import get_scenario
from timetravel.sim.kernel import Simulation
from timetravel.sim.scenario import Scenario
from timetravel.sim.world import World

GOSSIP = get_scenario("gossip")


class Ledger:
    """What the plugged-in sources were asked, over every Session the factory served."""

    def __init__(self, starts_every: int = 1) -> None:
        self.starts_every = starts_every
        self.restores = 0
        self.simulations: list[set[str]] = []
        self.refused: list[int] = []
        self.closed = 0
        self.inside = 0


class StrictSource(RecordedWorlds):
    """The plain source, counting, and accepting only every ``starts_every``-th snapshot as a start."""

    def __init__(self, session: Any, ledger: Ledger) -> None:
        super().__init__(session)
        self.ledger = ledger

    def restore(self, manifest: ManifestInfo, full_check: bool = False) -> World:
        self.ledger.restores += 1
        self.ledger.inside += 1
        try:
            return super().restore(manifest, full_check)
        finally:
            self.ledger.inside -= 1

    def simulation(self, world: World, **options: Any) -> Simulation:
        self.ledger.simulations.append(set(options))
        self.ledger.inside += 1
        try:
            return super().simulation(world, **options)
        finally:
            self.ledger.inside -= 1

    def can_start_at(self, manifest: ManifestInfo) -> bool:
        if manifest.index % self.ledger.starts_every == 0:
            return True
        self.ledger.refused.append(manifest.events)
        return False

    def close(self) -> None:
        self.ledger.closed += 1


def with_source(ledger: Ledger) -> Scenario:
    return dataclasses.replace(GOSSIP, world_source=lambda session: StrictSource(session, ledger))


@pytest.fixture
def strict(monkeypatch: pytest.MonkeyPatch) -> Iterator[Ledger]:
    """A ledger whose sources are the only way to a world: a reader restore or a Simulation built
    outside them fails the test."""
    ledger = Ledger()
    reader_restore = RecordingReader.restore
    simulation_init = Simulation.__init__

    def restore(
        self: RecordingReader, info: ManifestInfo, *, full_check: bool = False, **hooks: Any
    ) -> World:
        assert ledger.inside, "a world was restored from the reader, not through session.restore_world"
        return reader_restore(self, info, full_check=full_check, **hooks)

    def init(self: Simulation, *args: Any, **options: Any) -> None:
        assert ledger.inside, "a Simulation was built over a session's world, not through session.simulation"
        simulation_init(self, *args, **options)

    monkeypatch.setattr(RecordingReader, "restore", restore)
    monkeypatch.setattr(Simulation, "__init__", init)
    yield ledger


def test_a_scenario_without_a_world_source_gets_recorded_worlds(
    gossip_recording: tuple[Path, dict[str, Any]],
) -> None:
    path, _ = gossip_recording
    assert GOSSIP.world_source is None
    with Session.open(path) as session:
        assert type(session.source) is RecordedWorlds
        world = session.restore_world(session.snapshots_info[1], full_check=True)
        assert world.state_hash() == session.snapshots()[1].state_hash


def test_seeking_goes_through_the_source_and_starts_only_where_it_may(
    gossip_recording: tuple[Path, dict[str, Any]], strict: Ledger
) -> None:
    """A source that refuses odd snapshots: every seek re-executes from an even one (or #0), and
    the states are the plain Session's."""
    path, report = gossip_recording
    strict.starts_every = 2
    strict.inside += 1  # the plain session is the reference, outside the seam under test
    with Session.open(path) as plain:
        expected = {}
        for t_ns in (0, 700_000, report["t_end_ns"] // 3, report["t_end_ns"] // 2, report["t_end_ns"]):
            plain.goto(t_ns)
            expected[t_ns] = (plain.position, plain.state_hash())
    strict.inside -= 1
    strict.restores, strict.simulations = 0, []
    session = Session.open(path, scenario=with_source(strict))
    assert isinstance(session.source, StrictSource) and strict.restores == 1  # the initial world
    snapshots = session.snapshots()
    for t_ns, (position, state_hash) in expected.items():
        assert session.goto(t_ns) == position
        assert session.state_hash() == state_hash
    target = snapshots[3].events + 5  # snapshot 3 is refused: the seek starts at snapshot 2
    session.goto(f"#{target}")
    assert session.last_replay_events == target - snapshots[2].events
    assert snapshots[3].events in strict.refused
    session.back(1)
    session.step(2)
    assert strict.simulations and all("on_chain_batch" in options for options in strict.simulations)
    session.close()
    assert strict.closed == 1


def test_every_action_over_a_session_reaches_worlds_only_through_its_source(
    gossip_recording: tuple[Path, dict[str, Any]], strict: Ledger, tmp_path: Path
) -> None:
    path = tmp_path / "gossip.ttr"
    shutil.copy(gossip_recording[0], path)
    scenario = with_source(strict)
    with Session.open(path, scenario=scenario) as session:
        middle = session.end.t_ns // 2
        recorded = len(strict.simulations)
        result = branch(session, middle, {"branch_key": 1})
        assert result.name == "b1" and len(strict.simulations) > recorded
        assert "on_chain_batch" in strict.simulations[recorded]  # the Recorder's, through the source
        assert replay_session(session).verified
        with Session.open(path, scenario=scenario, branch="b1") as stored:
            assert replay_session(stored).verified
        assert compare(session, "main", "b1").first_divergence is not None
        assert first_divergence(session, "main", "b1") is not None
        assert diff(session, "main", "b1", path="nodes/n1").at_ns >= middle
        assert fanout(session, middle, 2).samples == 2
        assert likelihood(session, 1, points_max=2).points
        assert rerun(session).outcome == session.info.outcome
        found = find_first(session, "nodes/*/received >= 5")
        assert found.event is not None
        assert last_change(session, "nodes/n3", start_events=found.event).event is not None
        assert export_perfetto(session, tmp_path / "trace.json").events == session.end.events
        context = CommandContext(session=session)
        run_line("explain", context)
        run_line("goto #100", context)
    assert strict.closed >= 2 and strict.restores > 0


def test_the_recorder_runs_the_simulation_its_factory_builds(tmp_path: Path) -> None:
    """Recorder(simulation_factory=...) is how a branch records through its session's source."""
    from timetravel.recording import Recorder
    from timetravel.sim.runner import build_world

    built: list[dict[str, Any]] = []

    def factory(world: World, **options: Any) -> Simulation:
        built.append(options)
        return Simulation(GOSSIP, world, **options)

    config = GOSSIP.resolve_config({"nodes": 8, "rumors": 2})
    world = build_world(GOSSIP, config, 1)
    recorder = Recorder(
        GOSSIP, world, tmp_path / "r.ttr", snapshot_every_events=64, simulation_factory=factory
    )
    recorder.finish(recorder.run())
    assert len(built) == 1 and recorder.simulation.world is world
    assert {"overrides", "choice_log", "on_chain_batch", "determinism"} <= set(built[0])
    plain, _ = record_run(GOSSIP, config, 1, tmp_path / "plain.ttr", snapshot_every_events=64)
    with Session.open(tmp_path / "r.ttr") as session:
        assert session.end.events == plain["events"] and replay_session(session).verified
