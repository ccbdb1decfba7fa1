"""A real recording with two branches for the shell's tests: needle, and a future with the bug fixed.

``needle`` (built in) fails with ``assertion:needle.total`` once a worker restarts between a
dropped ack and the retransmit. The branch ``fixed`` forks main at event #200 with ``bug=none``
(a branchable key) and is recorded into the same file the way the explore engine's ``branch``
does: a BRANCH frame, then a Recorder with ``branch=`` on the forked world. So the file has
nodes, state paths, 102 faults, two metrics, snapshots, a failure and two branches: everything
the shell completes and plots. It takes ~0.2 s to make.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from timetravel.explore import Session
from timetravel.recording import Recorder, RecordingWriter, record_run
from timetravel.recording.format import FrameType
from timetravel.scenarios import get_scenario

SEED = 0
SNAPSHOT_EVERY_EVENTS = 64
FORK_EVENTS = 200
BRANCH = "fixed"


def make_needle_recording(path: Path) -> dict[str, Any]:
    """Record needle into ``path`` and append the branch ``fixed``; the main run's report."""
    scenario = get_scenario("needle")
    report, _world = record_run(
        scenario, scenario.resolve_config({}), SEED, path, snapshot_every_events=SNAPSHOT_EVERY_EVENTS
    )
    with Session.open(path) as session:
        session.goto(f"#{FORK_EVENTS}")
        world = session.world_copy()
    world.config = {**world.config, "bug": "none"}
    writer = RecordingWriter.append(path)
    writer.frame(
        FrameType.BRANCH,
        {
            "name": BRANCH,
            "parent": "main",
            "at_events": FORK_EVENTS,
            "at_ns": world.t_ns,
            "changes": {"set": ["bug=none"]},
        },
    )
    recorder = Recorder(
        scenario, world, path, snapshot_every_events=SNAPSHOT_EVERY_EVENTS, branch=BRANCH, writer=writer
    )
    recorder.finish(recorder.run())
    return report
