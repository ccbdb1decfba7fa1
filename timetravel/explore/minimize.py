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

What a candidate is, how one runs and what a minimization returns: :mod:`timetravel.explore.minimize_trials`.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, ParamSpec

from timetravel.explore.ddmin import ddmin
from timetravel.explore.minimize_trials import (
    STOP_CANCELLED,
    STOP_FIXPOINT,
    STOP_MAX_RUNS,
    STOP_MAX_SECONDS,
    STOP_MAX_STALL,
    Budget,
    Candidate,
    MinimizeResult,
    NothingToMinimize,
    Progress,
    Trial,
    run_candidate,
)
from timetravel.sim.choices import Overrides
from timetravel.sim.launch import Launch
from timetravel.sim.scenario import ConfigError, Scenario

CACHE_ENTRIES_MAX = 100_000
RUN_EVENTS_FACTOR = 4
RUN_EVENTS_SLACK = 100_000
"""A candidate run may process FACTOR times the original's events plus SLACK; past that it
counts as not reproducing (shrinking must not turn a failure into an endless run)."""
BISECT_STEPS_MAX = 64
CHOICES_SHRUNK_ONE_BY_ONE_MAX = 256
CHOICE_BISECT_STEPS_MAX = 16
"""Bisection steps per single choice (a chance site's values span 2**32; a few steps get close)."""
FAULTS_KEY = "faults"
"""The config key through which a scenario takes an explicit fault schedule (a JSON list)."""


P = ParamSpec("P")


class _Stop(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


BUDGET_DEFAULT = Budget()
"""The budgets of a minimization nobody bounded (Budget's defaults)."""


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
        budget: Budget = BUDGET_DEFAULT,
        progress: Callable[[Progress], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
        clock: Callable[[], float] = time.monotonic,
        launch: Launch | None = None,
        reserve_runs: int = 0,
    ) -> None:
        self.scenario = scenario
        self.reserve_runs = reserve_runs
        """Runs' worth of the time budget kept for what follows the search (recording the repro and
        checking where its test starts), measured by the original run's time."""
        self.first_run_seconds = 0.0
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
        self.original_failure: dict[str, Any] | None = None
        """The original run's failure (every field its detector recorded)."""
        self.identity: dict[str, Any] = {}
        """What besides the signature a reproduction keeps (``Scenario.failure_identity``)."""
        self.launch = launch
        """What the user named (sim/launch.py): a torch run's script may run in its trials."""

    # -- running candidates ---------------------------------------------------------------------

    def _check_budget(self) -> None:
        if self.should_stop is not None and self.should_stop():
            raise _Stop(STOP_CANCELLED)
        if self.runs >= self.budget.max_runs:
            raise _Stop(STOP_MAX_RUNS)
        reserved = self.reserve_runs * self.first_run_seconds
        if self.clock() - self.started + reserved >= self.budget.max_seconds:
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
        return run_candidate(self.scenario, self.seed, candidate, self.events_max, self.launch, self.past())

    def past(self) -> Callable[[Any], bool] | None:
        """Once the original failed: whether a trial's world has gone past that failure (its
        scenario's ``past_failure``), so the trial stops there; None: trials run to their end."""
        check, failure = self.scenario.past_failure, self.original_failure
        if check is None or failure is None:
            return None
        return lambda world: check(world, failure)

    def same_failure(self, trial: Trial) -> bool:
        """The trial fails with the signature and, where the scenario says more makes one bug (the
        torch scenario: the step and the tensor), with that too."""
        if trial.signature != self.signature or trial.failure is None:
            return False
        identify = self.scenario.failure_identity
        return identify is None or identify(trial.failure) == self.identity

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
        answer = self.same_failure(trial)
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
        self.first_run_seconds = self.clock() - self.started
        self.best_trial = trial
        self._report()
        if trial.failure is None:
            raise NothingToMinimize("the run does not fail: there is no failure to minimize")
        if self.signature is None:
            self.signature = trial.signature
        elif trial.signature != self.signature:
            raise NothingToMinimize(f"the run fails with {trial.signature}, not with {self.signature}")
        self.original_failure = dict(trial.failure)
        if self.scenario.failure_identity is not None:
            self.identity = self.scenario.failure_identity(self.original_failure)
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
                self.best.config[param.name],
                self._size_floor(param.name, int(param.minimum)),
                partial(self._with_size, param.name),
            )

    def _size_floor(self, name: str, minimum: int) -> int:
        """The param's minimum, or more where the failure involves more (``Scenario.size_floor``:
        a torch run keeps every rank its failure names)."""
        floor = self.scenario.size_floor
        if floor is None or self.original_failure is None:
            return minimum
        needed = floor(name, self.original_failure, self.best.config)
        return minimum if needed is None else max(minimum, needed)

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
            sizes={
                param.name: (before.get(param.name), self.best.config.get(param.name))
                for param in self.scenario.params
                if param.shrinkable
            },
            identity=dict(self.identity),
        )


def _sites_by_count(choices: list[tuple[str, str, int, int]]) -> list[str]:
    counts: dict[str, int] = {}
    for _, site, _, _ in choices:
        counts[site] = counts.get(site, 0) + 1
    return sorted(counts, key=lambda site: (-counts[site], site))


def runs(make: Callable[P, Minimizer]) -> Callable[P, MinimizeResult]:
    """``make``'s minimizer, built from the arguments given, run once: its result."""

    def run(*args: P.args, **kwargs: P.kwargs) -> MinimizeResult:
        return make(*args, **kwargs).run()

    return run


minimize = runs(Minimizer)
"""``minimize(scenario, config, seed, overrides=None, *, signature=None, budget=..., progress=None,
should_stop=None, launch=None, reserve_runs=0)``: minimize the failure of (scenario, config, seed,
overrides) with :class:`Minimizer`'s arguments; see the module docstring. ``launch``: what the user
named (a torch run's script may run in the trials); ``reserve_runs``: runs' worth of the time budget
left for what the caller does with the result."""
