"""Minimize a failure: the smallest inputs that still fail *the same way*.

A failing run is a pure function of (scenario, config, seed, choice overrides). The minimizer
re-runs candidates — it needs no recording — and keeps a candidate only when it fails with the
original **signature** (``kind:site``), so it never slips from the bug being chased to another
one. It works like Hypothesis's shrinker: small deterministic passes, each making the input
simpler in one dimension, run again and again until a whole round changes nothing (a fixpoint):

1. ``faults``: ddmin over the fault schedule (Zeller's delta debugging; every answer cached by
   the candidate's digest), after first trying no faults at all.
2. ``size``: the scenario's ``shrinkable`` int params (ranks, steps) lowered towards their
   minimum by bisection: a smaller world runs faster, so this comes before the finer passes.
3. ``fault_params``: each kept fault's numeric params and its window (``t_end - t_start``)
   bisected towards 0.
4. ``choices``: choices pushed towards 0, the canonical value of every site (no jitter,
   canonical order, no random fault): all sites at once, then site by site, then blocks of
   single choices, then each remaining choice bisected towards 0.

Zeroing a site works for draws not yet seen: :class:`ChoicePins` is an overrides mapping that
answers 0 for every index of a zeroed site. The final candidate is turned back into plain
overrides (every choice it pinned, with its value), which replay it exactly.

Budgets bound the search (``max_runs``, ``max_seconds`` of wall time — the minimizer is outside
the simulation path — and ``max_stall``, runs without progress); when one runs out, or the
caller cancels, the best candidate so far is the result. ``progress`` is called after every run.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from timetravel.sim.choices import Overrides
from timetravel.sim.encoding import digest
from timetravel.sim.kernel import Simulation
from timetravel.sim.runner import build_world
from timetravel.sim.scenario import ConfigError, Scenario
from timetravel.sim.world import World

MAX_RUNS_DEFAULT = 1_000
MAX_SECONDS_DEFAULT = 600.0
MAX_STALL_DEFAULT = 300
CACHE_ENTRIES_MAX = 100_000
RUN_EVENTS_FACTOR = 4
RUN_EVENTS_SLACK = 100_000
"""A candidate run may process FACTOR times the original's events plus SLACK; past that it
counts as not reproducing (shrinking must not turn a failure into an endless run)."""
BISECT_STEPS_MAX = 64
CHOICES_LISTED_MAX = 100_000
"""Non-canonical choices kept per run for the choices pass (beyond it only whole sites shrink)."""
CHOICES_SHRUNK_ONE_BY_ONE_MAX = 256
CHOICE_BISECT_STEPS_MAX = 16
"""Bisection steps per single choice (a chance site's values span 2**32; a few steps get close)."""
FAULTS_KEY = "faults"
"""The config key through which a scenario takes an explicit fault schedule (a JSON list)."""

STOP_FIXPOINT = "fixpoint"
STOP_MAX_RUNS = "max_runs"
STOP_MAX_SECONDS = "max_seconds"
STOP_MAX_STALL = "max_stall"
STOP_CANCELLED = "cancelled"

T = TypeVar("T")


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
        }

    def choice_pins(self) -> ChoicePins:
        """The overrides to run the minimized candidate with (compact form)."""
        return ChoicePins(self.pins.items(), self.zero_sites)


class _Stop(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def run_candidate(
    scenario: Scenario,
    seed: int,
    candidate: Candidate,
    events_max: int | None = None,
) -> Trial:
    """Build and run one candidate, logging its choices (no hash chain: nothing is recorded)."""
    world = build_world(scenario, copy.deepcopy(candidate.config), seed)
    return run_world(scenario, world, candidate, events_max, copy.deepcopy(world.faults))


def run_world(
    scenario: Scenario,
    world: World,
    candidate: Candidate,
    events_max: int | None,
    faults: list[dict[str, Any]],
    simulation_factory: Callable[..., Simulation] | None = None,
) -> Trial:
    """Run ``world`` (built or restored for ``candidate``) with the candidate's choices, logging them;
    ``faults`` is the schedule the trial reports (what a minimizer may remove). ``simulation_factory``
    (``factory(world, **options)``): how a world restored from a session is re-executed (its
    ``session.simulation``); None for a world this module built."""
    overrides = candidate.overrides()
    log = _ChoiceLog(overrides)
    build = simulation_factory or partial(Simulation, scenario)
    result = build(world, overrides=overrides or None, choice_log=log, chain=False).run(max_events=events_max)
    failure = result.failure if result.stop == "failure" else None
    return Trial(
        outcome="fail" if failure else "pass",
        failure=failure,
        events=result.events,
        t_end_ns=result.t_end_ns,
        faults=faults,
        choices=log.nonzero,
        choices_nonzero=log.nonzero_count,
        pinned=log.pinned,
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


class Minimizer:
    """One minimization: see the module docstring. Call :meth:`run` once."""

    def __init__(
        self,
        scenario: Scenario,
        config: dict[str, Any],
        seed: int,
        overrides: Overrides | None = None,
        *,
        signature: str | None = None,
        budget: Budget = Budget(),
        progress: Callable[[Progress], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.scenario = scenario
        self.seed = seed
        self.budget = budget
        self.progress = progress
        self.should_stop = should_stop
        self.clock = clock
        self.runs = 0
        self.stall = 0
        self.accepted = 0
        self.pass_name = "start"
        self.passes: dict[str, dict[str, int]] = {}
        self.cache: dict[bytes, bool] = {}
        self.started = clock()
        self.events_max: int | None = None
        pins = tuple(sorted((overrides or {}).items()))
        self.original = Candidate(dict(config), pins)
        self.signature = signature
        self.best = self.original
        self.best_trial: Trial | None = None

    # -- running candidates ---------------------------------------------------------------------

    def _check_budget(self) -> None:
        if self.should_stop is not None and self.should_stop():
            raise _Stop(STOP_CANCELLED)
        if self.runs >= self.budget.max_runs:
            raise _Stop(STOP_MAX_RUNS)
        if self.clock() - self.started >= self.budget.max_seconds:
            raise _Stop(STOP_MAX_SECONDS)
        if self.stall >= self.budget.max_stall:
            raise _Stop(STOP_MAX_STALL)

    def _run(self, candidate: Candidate, checked: bool = True) -> Trial:
        if checked:
            self._check_budget()
        self.runs += 1
        counts = self.passes.setdefault(self.pass_name, {"runs": 0, "accepted": 0})
        counts["runs"] += 1
        self.stall += 1
        return self.run_trial(candidate)

    def run_trial(self, candidate: Candidate) -> Trial:
        """Run one candidate from a fresh build (a subclass may start elsewhere: a snapshot)."""
        return run_candidate(self.scenario, self.seed, candidate, self.events_max)

    def reproduces(self, candidate: Candidate) -> bool:
        """Does ``candidate`` fail with the signature? Cached by the candidate's digest."""
        key = candidate.key()
        known = self.cache.get(key)
        if known is not None:
            return known
        try:
            trial = self._run(candidate)
        except ConfigError:  # e.g. fewer ranks than the schedule's targets: not a reproduction
            if len(self.cache) < CACHE_ENTRIES_MAX:
                self.cache[key] = False
            return False
        answer = trial.signature == self.signature
        if len(self.cache) < CACHE_ENTRIES_MAX:
            self.cache[key] = answer
        if answer:
            self._accept(candidate, trial)
        self._report()
        return answer

    def _accept(self, candidate: Candidate, trial: Trial) -> None:
        """A reproducing candidate becomes the best one (passes only try simpler candidates)."""
        self.best = candidate
        self.best_trial = trial
        if candidate != self.original:
            self.accepted += 1
            self.stall = 0
            self.passes.setdefault(self.pass_name, {"runs": 0, "accepted": 0})["accepted"] += 1

    def _report(self) -> None:
        if self.progress is None:
            return
        trial = self.best_trial
        self.progress(
            Progress(
                runs=self.runs,
                seconds=self.clock() - self.started,
                pass_name=self.pass_name,
                faults=len(trial.faults) if trial else 0,
                choices_nonzero=trial.choices_nonzero if trial else 0,
                accepted=self.accepted,
            )
        )

    # -- the whole search -----------------------------------------------------------------------

    def run(self) -> MinimizeResult:
        first = self._start()
        stopped_by = STOP_FIXPOINT
        try:
            self._make_schedule_explicit(first)
            while True:
                before = self.best
                for name, shrink_pass in self._passes():
                    self.pass_name = name
                    shrink_pass()
                if self.best == before:
                    break
        except _Stop as stop:
            stopped_by = stop.reason
        return self._result(first, stopped_by)

    def _start(self) -> Trial:
        """Run the original (always: a cancel or a budget stops only later runs) and learn its signature."""
        self.pass_name = "start"
        trial = self._run(self.original, checked=False)
        self.best_trial = trial
        self._report()
        if trial.failure is None:
            raise NothingToMinimize("the run does not fail: there is no failure to minimize")
        if self.signature is None:
            self.signature = trial.signature
        elif trial.signature != self.signature:
            raise NothingToMinimize(f"the run fails with {trial.signature}, not with {self.signature}")
        self.events_max = trial.events * RUN_EVENTS_FACTOR + RUN_EVENTS_SLACK
        self.best, self.best_trial = self.original, trial
        self.cache[self.original.key()] = True
        return trial

    def _make_schedule_explicit(self, trial: Trial) -> None:
        """Put the drawn fault schedule into the config as a list, which the faults pass then shrinks."""
        if self._takes_explicit_faults() and trial.faults:
            explicit = self.original.with_config(**{FAULTS_KEY: trial.faults})
            self.pass_name = "faults"
            if not self.reproduces(explicit):
                self._faults_unsupported = True

    _faults_unsupported = False

    def _takes_explicit_faults(self) -> bool:
        return any(param.name == FAULTS_KEY and param.kind == "json" for param in self.scenario.params)

    def _passes(self) -> list[tuple[str, Callable[[], None]]]:
        return [
            ("faults", self._shrink_faults),
            ("size", self._shrink_size),
            ("fault_params", self._shrink_fault_params),
            ("choices", self._shrink_choices),
        ]

    # -- pass 1: the fault schedule ---------------------------------------------------------------

    def _schedule(self) -> list[dict[str, Any]] | None:
        schedule = self.best.config.get(FAULTS_KEY)
        if self._faults_unsupported or not isinstance(schedule, list):
            return None
        return schedule

    def _shrink_faults(self) -> None:
        schedule = self._schedule()
        if not schedule:
            return

        def test(subset: list[dict[str, Any]]) -> bool:
            return self.reproduces(self.best.with_config(**{FAULTS_KEY: subset}))

        if test([]):
            return
        ddmin(schedule, test)

    # -- pass 2: the size of the world ------------------------------------------------------------

    def _shrink_size(self) -> None:
        for param in self.scenario.params:
            if not param.shrinkable or param.minimum is None:
                continue
            self._bisect_down(
                self.best.config[param.name], int(param.minimum), partial(self._with_size, param.name)
            )

    def _with_size(self, name: str, value: int) -> Candidate:
        return self.best.with_config(**{name: value})

    def _bisect_down(
        self, current: int, floor: int, make: Callable[[int], Candidate], steps_max: int = BISECT_STEPS_MAX
    ) -> None:
        """Lower an int from ``current`` towards ``floor``: try the floor, then bisect."""
        if current <= floor:
            return
        if self.reproduces(make(floor)):
            return
        low, high = floor, current
        for _ in range(steps_max):
            if high - low <= 1:
                return
            middle = (low + high) // 2
            if self.reproduces(make(middle)):
                high = middle
            else:
                low = middle

    # -- pass 3: each kept fault's parameters ------------------------------------------------------

    def _shrink_fault_params(self) -> None:
        schedule = self._schedule()
        if not schedule:
            return
        for position in range(len(schedule)):
            record = (self._schedule() or schedule)[position]
            for key, value in list(record.get("params", {}).items()):
                if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                    self._bisect_down(value, 0, partial(self._with_fault_param, position, key))
            if isinstance(record.get("t_start"), int) and isinstance(record.get("t_end"), int):
                window = record["t_end"] - record["t_start"]
                self._bisect_down(window, 0, partial(self._with_fault_window, position))

    def _with_fault_param(self, position: int, key: str, value: int) -> Candidate:
        schedule = copy.deepcopy(self._schedule() or [])
        schedule[position]["params"][key] = value
        return self.best.with_config(**{FAULTS_KEY: schedule})

    def _with_fault_window(self, position: int, window: int) -> Candidate:
        schedule = copy.deepcopy(self._schedule() or [])
        schedule[position]["t_end"] = schedule[position]["t_start"] + window
        return self.best.with_config(**{FAULTS_KEY: schedule})

    # -- pass 4: choices towards 0 ---------------------------------------------------------------

    def _shrink_choices(self) -> None:
        trial = self.best_trial
        if trial is None or not trial.choices_nonzero:
            return
        sites = _sites_by_count(trial.choices)
        if self.reproduces(self._with_zero_sites(sites)):
            return
        for site in sites:
            self.reproduces(self._with_zero_sites([site]))
        self._zero_choice_blocks()
        self._bisect_choices()

    def _with_zero_sites(self, sites: Iterable[str]) -> Candidate:
        zero = tuple(sorted(set(self.best.zero_sites) | set(sites)))
        return Candidate(self.best.config, self.best.pins, zero)

    def _with_pins(self, pins: dict[tuple[str, str, int], int]) -> Candidate:
        merged = dict(self.best.pins)
        merged.update(pins)
        return Candidate(self.best.config, tuple(sorted(merged.items())), self.best.zero_sites)

    def _zero_choice_blocks(self) -> None:
        """Pin blocks of the remaining non-canonical choices to 0, halving the block size."""
        trial = self.best_trial
        assert trial is not None
        keys = [(node, site, index) for node, site, index, _ in trial.choices]
        size = len(keys) // 2
        while size >= 1:
            start = 0
            while start < len(keys):
                block = keys[start : start + size]
                if self.reproduces(self._with_pins(dict.fromkeys(block, 0))):
                    del keys[start : start + size]
                else:
                    start += size
            size //= 2

    def _bisect_choices(self) -> None:
        trial = self.best_trial
        assert trial is not None
        for node, site, index, value in trial.choices[:CHOICES_SHRUNK_ONE_BY_ONE_MAX]:
            self._bisect_down(value, 0, partial(self._with_pin, (node, site, index)), CHOICE_BISECT_STEPS_MAX)

    def _with_pin(self, key: tuple[str, str, int], value: int) -> Candidate:
        return self._with_pins({key: value})

    # -- the answer ------------------------------------------------------------------------------

    def _result(self, first: Trial, stopped_by: str) -> MinimizeResult:
        trial = self.best_trial
        assert trial is not None and trial.failure is not None and self.signature is not None
        before = self.original.config
        changed = {
            param.name: (before.get(param.name), self.best.config.get(param.name))
            for param in self.scenario.params
            if param.name != FAULTS_KEY and before.get(param.name) != self.best.config.get(param.name)
        }
        return MinimizeResult(
            scenario=self.scenario.name,
            seed=self.seed,
            signature=self.signature,
            config=self.best.config,
            overrides={(node, site, index): value for node, site, index, value in trial.pinned},
            pins=dict(self.best.pins),
            zero_sites=self.best.zero_sites,
            failure=trial.failure,
            faults_before=len(first.faults),
            faults_after=len(trial.faults),
            faults_kept=tuple(str(record.get("id", "")) for record in trial.faults),
            choices_before=first.choices_nonzero,
            choices_after=trial.choices_nonzero,
            runs=self.runs,
            seconds=self.clock() - self.started,
            stopped_by=stopped_by,
            params_changed=changed,
            passes=self.passes,
            events=trial.events,
        )


def _sites_by_count(choices: list[tuple[str, str, int, int]]) -> list[str]:
    counts: dict[str, int] = {}
    for _, site, _, _ in choices:
        counts[site] = counts.get(site, 0) + 1
    return sorted(counts, key=lambda site: (-counts[site], site))


def _split(items: list[T], parts: int) -> Iterator[list[T]]:
    size, extra = divmod(len(items), parts)
    start = 0
    for part in range(parts):
        end = start + size + (1 if part < extra else 0)
        yield items[start:end]
        start = end


def ddmin(items: list[T], test: Callable[[list[T]], bool]) -> list[T]:
    """Zeller's ddmin: a 1-minimal sublist of ``items`` for which ``test`` holds (it holds for all).

    Try each chunk alone, then each complement, at a granularity that doubles when neither
    helps; the order of ``items`` is kept in every sublist tried.
    """
    granularity = 2
    while len(items) >= 2:
        chunks = list(_split(items, granularity))
        reduced = next((chunk for chunk in chunks if chunk and test(chunk)), None)
        if reduced is not None:
            items, granularity = reduced, 2
            continue
        complement = None
        if granularity > 2:
            for skip in range(len(chunks)):
                candidate = [item for index, chunk in enumerate(chunks) if index != skip for item in chunk]
                if test(candidate):
                    complement = candidate
                    break
        if complement is not None:
            items, granularity = complement, max(granularity - 1, 2)
            continue
        if granularity >= len(items):
            break
        granularity = min(len(items), granularity * 2)
    return items


def minimize(
    scenario: Scenario,
    config: dict[str, Any],
    seed: int,
    overrides: Overrides | None = None,
    *,
    signature: str | None = None,
    budget: Budget = Budget(),
    progress: Callable[[Progress], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> MinimizeResult:
    """Minimize the failure of (scenario, config, seed, overrides); see the module docstring."""
    minimizer = Minimizer(
        scenario,
        config,
        seed,
        overrides,
        signature=signature,
        budget=budget,
        progress=progress,
        should_stop=should_stop,
    )
    return minimizer.run()
