"""Reference runs: the run a detector compares a finished run with (coordinator side).

Two detectors judge a run that otherwise passed by what it *should* have been, which no single run
shows: ``resume_mismatch`` (world/resume.py) compares a restarted run with the same seed's run without
the crash, ``silent_corruption`` (world/silent.py) a run whose data a fault changed with the same seed's
run in which that fault fired but wrote nothing. Each reference is a second, full run of the script: its
own Simulation, rank processes and private working directory (world/workdir.py), started after the run's
ranks ended. Its ``c10d`` node carries a ``mark`` (``resume_reference``, ``silent_reference``) that tells
the run's own checks it is a reference (a reference never starts another) and tells the faults what to
do in it; what the detector compares is copied out of the reference's ``c10d`` node (``kept``).

A reference is a pure function of the run's seed, script, working directory's contents, the config it
runs with and its mark, so the run's host (``ctx.processes``) remembers the last :data:`REFERENCES_KEPT`
by that key: a Session re-executing the run to its end (its world source owns one host for every
re-execution) pays for each reference once.
"""

from __future__ import annotations

import copy
from typing import Any

import xxhash

from timetravel.sim.encoding import pack
from timetravel.sim.world import World

REFERENCES_KEPT = 8
"""References a host remembers (keyed by everything they are a function of); the oldest goes first."""


def reference_run(world: World, host: Any, config: dict[str, Any], mark: str, kept: str) -> dict[str, Any]:
    """Run (or recall) the reference of ``world`` with ``config``, its ``c10d`` node marked ``mark``:
    ``failure`` (its message; None when it passed) and ``kept`` (a copy of its ``c10d`` node's
    ``kept`` part). It runs what the run ran (``host.launch``), in a Simulation of its own."""
    from timetravel.scenarios import get_scenario
    from timetravel.sim.kernel import Simulation
    from timetravel.sim.runner import build_world

    state = world.nodes["c10d"]
    key = xxhash.xxh3_128_hexdigest(
        pack([world.seed, state["script_sha256"], state.get("workdir_sha256", ""), config, mark])
    )
    remembered: dict[str, dict[str, Any]] = host.references
    if key in remembered:
        return remembered[key]
    scenario = get_scenario("torch")
    reference_world = build_world(scenario, config, world.seed, host.launch)
    reference_world.nodes["c10d"][mark] = True
    result = Simulation(scenario, reference_world, launch=host.launch).run()
    outcome = {
        "failure": None if result.failure is None else str(result.failure.get("message", "")),
        "kept": copy.deepcopy(reference_world.nodes["c10d"].get(kept, {})),
    }
    if len(remembered) >= REFERENCES_KEPT:
        remembered.pop(next(iter(remembered)))
    remembered[key] = outcome
    return outcome


def is_reference(state: dict[str, Any]) -> bool:
    """Whether the ``c10d`` node ``state`` is a reference run's (its checks start no reference)."""
    return bool(state.get("resume_reference") or state.get("silent_reference"))
