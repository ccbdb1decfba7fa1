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

from branch_writing import append_branch, world_at

from timetravel.recording import record_run
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
    world = world_at(path, FORK_EVENTS)
    world.config = {**world.config, "bug": "none"}
    changes = {"set": ["bug=none"]}
    append_branch(
        path,
        scenario,
        world,
        FORK_EVENTS,
        changes=changes,
        name=BRANCH,
        snapshot_every_events=SNAPSHOT_EVERY_EVENTS,
    )
    return report
