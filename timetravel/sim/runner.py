"""Run a scenario from (name or Scenario, settings, seed) to a report: the one path every front end uses.

``run --json``, the farm, the determinism checker and the benchmarks all call :func:`run_report`,
so the same inputs give the same report fields everywhere. Wall time is not measured here (this is
the simulation path); callers add it.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping
from typing import Any

from timetravel.sim.failure import failure_fields
from timetravel.sim.fingerprint import code_fingerprint, platform_fingerprint
from timetravel.sim.kernel import PauseCallback, RunResult, Simulation, chain_head
from timetravel.sim.launch import NO_LAUNCH, Launch
from timetravel.sim.scenario import Scenario
from timetravel.sim.world import World


def build_world(scenario: Scenario, config: dict[str, Any], seed: int, launch: Launch | None = None) -> World:
    """Build the scenario's initial world and check the scenario kept the contract. ``launch``: what
    the user named (sim/launch.py), for a scenario whose worlds run their code."""
    if scenario.build_launched is not None:
        world = scenario.build_launched(config, seed, launch or NO_LAUNCH)
    else:
        world = scenario.build(config, seed)
    if not isinstance(world, World):
        raise TypeError(f"scenario {scenario.name}: build() returned {type(world).__name__}, not a World")
    world.display_unit = scenario.display_unit
    return world


def run_report(
    scenario: Scenario,
    config: dict[str, Any],
    seed: int,
    *,
    until_ns: int | None = None,
    max_events: int | None = None,
    determinism: str | None = None,
    pause_every_events: int | None = None,
    on_pause: PauseCallback | None = None,
    launch: Launch | None = None,
) -> tuple[dict[str, Any], World]:
    """Run one seed to the end (or ``until_ns``) and return the report and the final world.

    ``determinism`` is the guard's mode (None: the scenario's own, normally virtualize).
    ``on_pause`` (called every ``pause_every_events`` events, outside any handler) lets a caller
    such as the farm watch a wall-clock budget and stop a run by raising; it never changes the run.
    ``launch``: what the user named on the command line (sim/launch.py; the torch scenario's script).
    """
    world = build_world(scenario, config, seed, launch)
    simulation = Simulation(scenario, world, determinism=determinism, launch=launch)
    result = simulation.run(
        until_ns=until_ns, max_events=max_events, pause_every_events=pause_every_events, on_pause=on_pause
    )
    report = finished_report(
        scenario, config, seed, simulation, result, world.state_hash(), chain_head(world)
    )
    return report, world


def finished_report(
    scenario: Scenario,
    config: dict[str, Any],
    seed: int,
    simulation: Simulation,
    result: RunResult,
    state_hash: str,
    hash_chain: str,
) -> dict[str, Any]:
    """The report of a finished run (``run --json``'s keys): the one shape of a plain run's
    report and a recorded run's."""
    world = simulation.world
    report: dict[str, Any] = {
        "scenario": scenario.name,
        "seed": seed,
        "config": config,
        "outcome": result.outcome,
        "failure": failure_fields(result.failure),
        "events": result.events,
        "t_end_ns": result.t_end_ns,
        "state_hash": state_hash,
        "hash_chain": hash_chain,
        "determinism": simulation.determinism,
        "code_fingerprint": code_fingerprint(scenario.build.__module__),
        "platform_fingerprint": platform_fingerprint(),
    }
    if scenario.summarize is not None:
        report["summary"] = {**scenario.summarize(world), **processes_summary(simulation)}
    return report


def processes_summary(simulation: Simulation) -> dict[str, Any]:
    """What the owner of the run's external processes says of them (``Scenario.processes``): the torch
    host names the processes a rank started that were still running when it ended, and were killed."""
    summary = getattr(simulation.processes, "summary", None)
    return dict(summary()) if summary is not None else {}


def public_failure(failure: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The failure fields every record has (kind, node, t_ns, message, signature): what a recording's
    frames keep and a replay checks; a report shows every field (:func:`failure_fields`)."""
    if failure is None:
        return None
    shown = {key: failure[key] for key in ("kind", "node", "t_ns", "message", "signature")}
    if failure["kind"] == "internal" and "traceback" in failure:
        shown["traceback"] = failure["traceback"]
    return shown


def reproduce_command(
    scenario_name: str,
    seed: int,
    settings: Iterable[str],
    until: str | None = None,
    scenario_target: str | None = None,
    determinism: str | None = None,
) -> str:
    """The exact command line that reruns this seed with these settings."""
    words = ["timetravel", "run", scenario_name, "--seed", str(seed)]
    if scenario_target:
        words += ["--scenario", scenario_target]
    if determinism:
        words += ["--determinism", determinism]
    for setting in settings:
        words += ["--set", setting]
    if until is not None:
        words += ["--until", until]
    return shlex.join(words)
