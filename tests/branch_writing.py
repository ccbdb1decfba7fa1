"""A branch written the way the explore engine writes one: a BRANCH frame appended to the recording,
then a Recorder running the fork's world into the same file. Tests that check the engine's branches,
seeks and searches across a fork build their branched recordings with this rather than with the
engine under test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from timetravel.explore import Session
from timetravel.recording import Recorder, RecordingWriter
from timetravel.recording.format import FrameType
from timetravel.sim import Scenario, World


def world_at(path: Path, fork_events: int, scenario: Scenario | None = None) -> World:
    """A copy of the recorded main run's world after event #``fork_events``."""
    with Session.open(path, scenario=scenario) as session:
        session.goto(f"#{fork_events}")
        return session.world_copy()


def append_branch(
    path: Path,
    scenario: Scenario,
    world: World,
    fork_events: int,
    *,
    changes: dict[str, Any] | None = None,
    name: str = "b1",
    snapshot_every_events: int = 512,
) -> dict[str, Any]:
    """Run ``world`` (the fork's, already changed as ``changes`` says) on as branch ``name`` of
    main, recorded into ``path``; the branch's end record."""
    writer = RecordingWriter.append(path)
    header = {"name": name, "parent": "main", "at_events": fork_events, "at_ns": world.t_ns}
    writer.frame(FrameType.BRANCH, header if changes is None else {**header, "changes": changes})
    recorder = Recorder(
        scenario, world, path, snapshot_every_events=snapshot_every_events, branch=name, writer=writer
    )
    _, end = recorder.run_to_end()
    return end
