"""What a checker worker process computes: chain digests of whole runs, and one batch in detail.

Phase 1 (:func:`digest_run`) runs a seed and keeps only the chain digest after every batch: a few
bytes per 4096 events, enough for the parent to tell two processes apart and to name the first
batch where they disagree (the chain is cumulative, so the first differing digest *is* the first
differing batch).

Phase 2 (:class:`TraceSession`) re-runs the seed in a fresh process with the same hash seed up to
that batch, keeps a copy of the world there, and lists the batch's events (time, seq, node, kind,
payload digest). Once the parent has compared both sides' lists, it asks each side for the world
right after the first divergent event: node digests first, then the states of the nodes that
differ. A re-run also says whether it reproduced its own phase-1 digests, which separates
hash-order leaks (reproducible per hash seed) from clock, entropy or thread leaks (not).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from timetravel.scenarios import UnknownScenarioError, get_scenario, load_target
from timetravel.sim.encoding import digest, pack
from timetravel.sim.event import Event
from timetravel.sim.kernel import CHAIN_BATCH_EVENTS_DEFAULT, STOP_MAX_EVENTS, Simulation, chain_head
from timetravel.sim.launch import NO_LAUNCH, Launch
from timetravel.sim.runner import build_world, public_failure
from timetravel.sim.scenario import Scenario
from timetravel.sim.timefmt import parse_time
from timetravel.sim.world import World

BATCH_EVENTS = CHAIN_BATCH_EVENTS_DEFAULT
"""The checker hashes in the kernel's default batches, so its heads equal ``run --json``'s hash_chain."""


@dataclass(frozen=True)
class RunSpec:
    """What to run, exactly as the user asked for it (every process resolves it the same way)."""

    scenario_name: str
    scenario_target: str | None
    settings: tuple[str, ...]
    until: str | None
    determinism: str | None

    def scenario(self) -> Scenario:
        if self.scenario_target:
            scenario = load_target(self.scenario_target)
            if scenario.name != self.scenario_name:
                raise UnknownScenarioError(
                    f"{self.scenario_target} is scenario {scenario.name!r}, not {self.scenario_name!r}"
                )
            return scenario
        return get_scenario(self.scenario_name)

    def launch(self) -> Launch:
        """What the parent's command line launched (sim/launch.py): the scripts it named with
        ``--set script=PATH`` may run in this process too (a torch run)."""
        if self.scenario_name != "torch":
            return NO_LAUNCH
        from timetravel.torch.world.specs import launch_naming, named_scripts

        return launch_naming(named_scripts(self.settings))

    def resolve(self) -> tuple[Scenario, dict[str, Any], int | None]:
        scenario = self.scenario()
        config = scenario.resolve_config(list(self.settings))
        until_ns = parse_time(self.until, scenario.display_unit) if self.until else None
        return scenario, config, until_ns

    def arguments(self) -> list[str]:
        """The command-line form the worker parses back (see ``worker.py``)."""
        words = ["--scenario-name", self.scenario_name]
        if self.scenario_target:
            words += ["--scenario-target", self.scenario_target]
        for setting in self.settings:
            words += ["--set", setting]
        if self.until:
            words += ["--until", self.until]
        if self.determinism:
            words += ["--determinism", self.determinism]
        return words


def event_record(event: Event) -> list[Any]:
    """``[t_ns, seq, node, kind, payload digest]``: an event in JSON, comparable across processes."""
    t_ns, seq, dst, kind, payload = event
    return [t_ns, seq, dst, kind, digest(payload).hex()]


def digest_run(spec: RunSpec, seed: int) -> dict[str, Any]:
    """Run ``seed`` to the end and return its chain digests, head and final facts (phase 1)."""
    scenario, config, until_ns = spec.resolve()
    digests: list[str] = []

    def on_batch(first: int, events: list[Event], digest_after: bytes) -> None:
        digests.append(digest_after.hex())

    launch = spec.launch()
    world = build_world(scenario, config, seed, launch)
    simulation = Simulation(
        scenario, world, determinism=spec.determinism, on_chain_batch=on_batch, launch=launch
    )
    result = simulation.run(until_ns=until_ns)
    return {
        "seed": seed,
        "digests": digests,
        "head": chain_head(world),
        "events": result.events,
        "t_end_ns": result.t_end_ns,
        "state_hash": world.state_hash(),
        "outcome": result.outcome,
        "failure": public_failure(result.failure),
    }


class TraceSession:
    """One side of a mismatch, re-run in its own process (phase 2; see the module docstring)."""

    def __init__(self, spec: RunSpec, seed: int) -> None:
        self.spec = spec
        self.seed = seed
        self.scenario, self.config, self.until_ns = spec.resolve()
        self.window_world: World | None = None
        self.state_world: World | None = None

    def _simulation(self, world: World, on_batch: Any = None) -> Simulation:
        return Simulation(
            self.scenario,
            world,
            determinism=self.spec.determinism,
            on_chain_batch=on_batch,
            launch=self.spec.launch(),
        )

    def open_batch(self, batch: int | None) -> dict[str, Any]:
        """Run to the start of ``batch``, keep the world there, then list the batch's events.

        ``batch=None`` keeps the initial world and lists nothing (for a final-state comparison).
        """
        world = build_world(self.scenario, self.config, self.seed, self.spec.launch())
        if batch is None:
            self.window_world = copy.deepcopy(world)
            return {"digests": [], "records": [], "window_digest": None}
        digests: list[str] = []
        window: list[Event] = []
        start = batch * BATCH_EVENTS

        def on_batch(first: int, events: list[Event], digest_after: bytes) -> None:
            digests.append(digest_after.hex())
            if first == start:
                window.extend(events)

        simulation = self._simulation(world, on_batch)
        reached = True
        if start:
            reached = simulation.run(until_ns=self.until_ns, max_events=start).stop == STOP_MAX_EVENTS
        self.window_world = copy.deepcopy(world)
        if reached:
            simulation.run(until_ns=self.until_ns, max_events=BATCH_EVENTS)
        if not window:
            window = list(world.chain_batch)  # the run ended inside the batch: its open part
        window_digest = digests[batch] if len(digests) > batch else chain_head(world)
        return {
            "digests": digests[:batch],
            "records": [event_record(event) for event in window],
            "window_digest": window_digest,
        }

    def state_after(self, index: int | None) -> dict[str, Any]:
        """The world right after the window's event ``index`` (None: at the end of the run)."""
        if self.window_world is None:
            raise RuntimeError("open a batch first")
        world = copy.deepcopy(self.window_world)
        simulation = self._simulation(world)
        if not world.failures:
            max_events = None if index is None else index + 1
            simulation.run(until_ns=self.until_ns, max_events=max_events)
        self.state_world = world
        return {
            "events": world.events_processed,
            "t_ns": world.t_ns,
            "nodes": {name: digest(state).hex() for name, state in world.nodes.items()},
            "parts": {name: part.hex() for name, part in world.part_digests()},
        }

    def node_states(self, names: list[str]) -> dict[str, bytes | None]:
        """The packed states of ``names`` in the world of the last :meth:`state_after`."""
        if self.state_world is None:
            raise RuntimeError("ask for state_after first")
        nodes = self.state_world.nodes
        return {name: pack(nodes[name]) if name in nodes else None for name in names}
