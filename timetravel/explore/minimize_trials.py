"""What a minimization tries and what it returns: candidates, their runs (trials), budgets, progress
and the result (the passes that choose the candidates: :mod:`timetravel.explore.minimize`)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from timetravel.sim.encoding import digest
from timetravel.sim.kernel import Simulation
from timetravel.sim.launch import Launch
from timetravel.sim.runner import build_world
from timetravel.sim.scenario import Scenario
from timetravel.sim.world import World

MAX_RUNS_DEFAULT = 1_000
MAX_SECONDS_DEFAULT = 600.0
MAX_STALL_DEFAULT = 300
CHOICES_LISTED_MAX = 100_000
"""Non-canonical choices kept per run for the choices pass (beyond it only whole sites shrink)."""

STOP_FIXPOINT = "fixpoint"
STOP_MAX_RUNS = "max_runs"
STOP_MAX_SECONDS = "max_seconds"
STOP_MAX_STALL = "max_stall"
STOP_CANCELLED = "cancelled"


class NothingToMinimize(ValueError):
    """The run given to the minimizer does not fail, so there is no failure to keep."""


class ChoicePins(dict[tuple[str, str, int], int]):
    """Overrides that pin listed choices and answer 0 for every draw at a zeroed site.

    The kernel reads overrides with ``overrides.get((node, site, index))``; a zeroed site has
    no listed keys, so its draws (even ones no earlier run made) come back canonical.
    """

    def __init__(self, pins: Iterable[tuple[tuple[str, str, int], int]], zero_sites: Iterable[str]) -> None:
        super().__init__(pins)
        self.zero_sites = frozenset(zero_sites)

    def get(self, key: tuple[str, str, int], default: Any = None) -> Any:
        value = dict.get(self, key)
        if value is not None:
            return value
        if key[1] in self.zero_sites:
            return 0
        return default

    def __bool__(self) -> bool:
        return bool(self.zero_sites) or len(self) > 0


@dataclass(frozen=True)
class Budget:
    max_runs: int = MAX_RUNS_DEFAULT
    max_seconds: float = MAX_SECONDS_DEFAULT
    max_stall: int = MAX_STALL_DEFAULT


@dataclass(frozen=True)
class Candidate:
    """One input to try: the whole config (with an explicit schedule), pinned choices, zeroed sites."""

    config: dict[str, Any]
    pins: tuple[tuple[tuple[str, str, int], int], ...] = ()
    zero_sites: tuple[str, ...] = ()

    def key(self) -> bytes:
        return digest([self.config, [[*key, value] for key, value in self.pins], list(self.zero_sites)])

    def overrides(self) -> ChoicePins:
        return ChoicePins(self.pins, self.zero_sites)

    def with_config(self, **changes: Any) -> Candidate:
        return Candidate({**self.config, **changes}, self.pins, self.zero_sites)


@dataclass(frozen=True)
class Trial:
    """What one run of a candidate did."""

    outcome: str
    failure: dict[str, Any] | None
    events: int
    t_end_ns: int
    faults: list[dict[str, Any]]
    choices: list[tuple[str, str, int, int]]
    """Non-canonical choices drawn, ``(node, site, index, value)`` (at most CHOICES_LISTED_MAX)."""
    choices_nonzero: int
    pinned: list[tuple[str, str, int, int]]
    """Every choice the candidate forced (pinned or zeroed), to replay it with plain overrides."""
    stopped_past_failure: bool = False
    """The trial was stopped once it had gone past the failure it should reproduce (it did not)."""

    @property
    def signature(self) -> str | None:
        return None if self.failure is None else self.failure["signature"]


@dataclass(frozen=True)
class Progress:
    runs: int
    seconds: float
    pass_name: str
    faults: int
    choices_nonzero: int
    accepted: int


@dataclass(frozen=True)
class MinimizeResult:
    scenario: str
    seed: int
    signature: str
    config: dict[str, Any]
    overrides: dict[tuple[str, str, int], int]
    """Every choice the minimized run forced, with its value: plain overrides that replay it."""
    pins: dict[tuple[str, str, int], int]
    zero_sites: tuple[str, ...]
    """The same run said compactly: these pins, and every draw at these sites is 0."""
    failure: dict[str, Any]
    faults_before: int
    faults_after: int
    faults_kept: tuple[str, ...]
    choices_before: int
    choices_after: int
    runs: int
    seconds: float
    stopped_by: str
    params_changed: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    passes: dict[str, dict[str, int]] = field(default_factory=dict)
    out: str | None = None
    pytest: str | None = None
    events: int = 0
    """Events the minimized run processes until it fails."""
    start_events: int = 0
    start_ns: int = 0
    """Where the repro's pytest starts: the latest snapshot of the repro recording (``out``) before the
    first kept fault and the first difference from the fault-free run (explore/minimize_run.py)."""
    start_check: str = ""
    """What the export check found: the run from the start passes without the kept faults, or why not."""
    repro_branch: str = "main"
    """The branch of ``out`` that holds the minimized run (a minimized branch: ``<branch>-min``)."""
    sizes: dict[str, tuple[Any, Any]] = field(default_factory=dict)
    """The scenario's shrinkable sizes, before and after (a torch run: ``nproc``)."""
    identity: dict[str, Any] = field(default_factory=dict)
    """What besides the signature the minimized failure kept (a torch run: its step and tensor)."""
    input_bytes: int = 0
    out_bytes: int = 0
    """Sizes of the recording minimized and of the repro recording written (0: none written)."""

    @property
    def partial(self) -> bool:
        """True when a budget or a cancel stopped the search before a fixpoint: the best result so far."""
        return self.stopped_by != STOP_FIXPOINT

    def to_data(self) -> dict[str, Any]:
        """The ``minimize --json`` object."""
        return {
            "signature": self.signature,
            "faults_before": self.faults_before,
            "faults_after": self.faults_after,
            "faults_kept": list(self.faults_kept),
            "choices_before": self.choices_before,
            "choices_after": self.choices_after,
            "runs": self.runs,
            "seconds": round(self.seconds, 3),
            "stopped_by": self.stopped_by,
            "partial": self.partial,
            "out": self.out,
            "pytest": self.pytest,
            "start_events": self.start_events,
            "start_check": self.start_check,
            **{f"{name}_before": before for name, (before, _after) in self.sizes.items()},
            **{f"{name}_after": after for name, (_before, after) in self.sizes.items()},
            "same_failure": dict(self.identity),
            "input_bytes": self.input_bytes,
            "out_bytes": self.out_bytes,
        }

    def choice_pins(self) -> ChoicePins:
        """The overrides to run the minimized candidate with (compact form)."""
        return ChoicePins(self.pins.items(), self.zero_sites)


PAST_CHECK_EVERY_EVENTS = 32
"""How often a trial looks whether it has run past the failure it should reproduce."""


class _PastFailure(Exception):
    """A trial ran past where the failure it should reproduce happened (``Scenario.past_failure``)."""


def run_candidate(
    scenario: Scenario,
    seed: int,
    candidate: Candidate,
    events_max: int | None = None,
    launch: Launch | None = None,
    past: Callable[[World], bool] | None = None,
) -> Trial:
    """Build and run one candidate, logging its choices (no hash chain: nothing is recorded);
    ``launch``: what the user named (sim/launch.py: a torch run's script); ``past``: see run_world."""
    world = build_world(scenario, copy.deepcopy(candidate.config), seed, launch)
    factory = partial(Simulation, scenario, launch=launch)
    return run_world(scenario, world, candidate, events_max, copy.deepcopy(world.faults), factory, past)


def run_world(
    scenario: Scenario,
    world: World,
    candidate: Candidate,
    events_max: int | None,
    faults: list[dict[str, Any]],
    simulation_factory: Callable[..., Simulation] | None = None,
    past: Callable[[World], bool] | None = None,
) -> Trial:
    """Run ``world`` (built or restored for ``candidate``) with the candidate's choices, logging them;
    ``faults`` is the schedule the trial reports (what a minimizer may remove). ``simulation_factory``
    (``factory(world, **options)``): how a world restored from a session is re-executed (its
    ``session.simulation``); None for a world this module built. ``past(world)``: True once the run
    has gone past the failure it should reproduce; the trial stops there and passes (``stopped``)."""
    overrides = candidate.overrides()
    log = _ChoiceLog(overrides)
    build = simulation_factory or partial(Simulation, scenario)
    simulation = build(world, overrides=overrides or None, choice_log=log, chain=False)
    stopped = False
    if past is None:
        result = simulation.run(max_events=events_max)
    else:

        def check(_simulation: Simulation) -> None:
            if past(world):
                raise _PastFailure()

        try:
            result = simulation.run(
                max_events=events_max, pause_every_events=PAST_CHECK_EVERY_EVENTS, on_pause=check
            )
        except _PastFailure:  # the Simulation ended its processes on the way out
            stopped = True
    failure = None if stopped or result.stop != "failure" else result.failure
    return Trial(
        outcome="fail" if failure else "pass",
        failure=failure,
        events=world.events_processed,
        t_end_ns=world.t_ns,
        faults=faults,
        choices=log.nonzero,
        choices_nonzero=log.nonzero_count,
        pinned=log.pinned,
        stopped_past_failure=stopped,
    )


class _ChoiceLog(list[list[Any]]):
    """A choice log that keeps only what the minimizer needs (bounded), not every draw."""

    def __init__(self, overrides: ChoicePins) -> None:
        super().__init__()
        self.overrides = overrides
        self.nonzero: list[tuple[str, str, int, int]] = []
        self.nonzero_count = 0
        self.pinned: list[tuple[str, str, int, int]] = []

    def append(self, entry: list[Any]) -> None:
        node, site, index, value = entry
        if value:
            self.nonzero_count += 1
            if len(self.nonzero) < CHOICES_LISTED_MAX:
                self.nonzero.append((node, site, index, value))
        if self.overrides.get((node, site, index)) is not None:
            self.pinned.append((node, site, index, value))
