"""World sources for seek tests: a stand-in for the Session's own that turns its shortcuts off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from timetravel.explore import Session
from timetravel.explore.world_source import RecordedWorlds
from timetravel.recording import record_run
from timetravel.scenarios import get_scenario
from timetravel.sim.kernel import Simulation
from timetravel.sim.world import World


class FullRestores:
    """The world source every seek had before sharing and parking: not RecordedWorlds itself, so
    each restore decodes every node afresh and every seek restores and re-executes."""

    def __init__(self, session: Session) -> None:
        self.plain = RecordedWorlds(session)

    def restore(self, manifest: Any, full_check: bool = False) -> World:
        return self.plain.restore(manifest, full_check)

    def simulation(self, world: World, **options: Any) -> Simulation:
        return self.plain.simulation(world, **options)

    def can_start_at(self, manifest: Any) -> bool:
        return True

    def before_copy(self, world: World) -> None:
        """Nothing to keep."""

    def close(self) -> None:
        """Nothing to release."""


def hashes_along(session: Session, targets: list[int]) -> dict[int, str]:
    """Seek ``session`` to each event count of ``targets`` in turn (each must be reached): the state
    hash at each."""
    found = {}
    for target in targets:
        session.goto_event(target)
        assert session.position.events == target, session.world.failures
        found[target] = session.state_hash()
    return found


def reference_session(path: Path) -> Session:
    """A Session on ``path`` whose seeks take none of the shortcuts: what theirs must equal."""
    session = Session.open(path)
    session.source = FullRestores(session)
    return session


def record_tree32(directory: Path) -> tuple[Path, dict[str, Any]]:
    """A 32-rank tree at the collective level, 3 steps, a snapshot every 128 events (seed 4)."""
    scenario = get_scenario("dp_training")
    config = scenario.resolve_config(
        {"ranks": 32, "allreduce": "tree", "params": 256, "steps": 3, "fabric_level": "collective"}
    )
    path = directory / "tree32.ttr"
    report, _world = record_run(scenario, config, 4, path, snapshot_every_events=128)
    return path, report
