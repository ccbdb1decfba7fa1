"""Search in time: the first moment a predicate holds.

**find_first(predicate)** answers "when did the replicas first differ, and on which rank?" for a
predicate over state paths (:mod:`timetravel.explore.paths`, e.g. ``nonfinite(nodes/*/weights)``).
It costs far less than re-running the whole recording:

1. ``bisect``: evaluate the predicate on snapshots only (a restore each, no re-execution) and
   binary-search for the first snapshot where it holds. Then re-execute the one interval before
   that snapshot in chunks of about sqrt(interval) events, evaluating after each chunk, and once a
   chunk ends with the predicate holding, re-execute that chunk event by event. So an interval of
   8192 events costs about 2 x 90 evaluations, not 8192, and the answer is the exact first event.
   This is exact when the predicate is **monotone** along the run (once it holds it keeps holding:
   a NaN in the weights, a step count past 40, a failure recorded, replicas that diverged and are
   never re-synced). For a predicate that can hold and stop holding, bisection can land on a later
   moment than the first.
2. ``scan``: evaluate after every event from the start. Exact for any predicate, and the only
   sound way for ``changed(...)``, which holds at single events; ``auto`` (the default) picks
   ``scan`` for predicates that use ``changed`` or compare with ``==``/``!=`` (a counter equals a
   value for a while, then moves on) and ``bisect`` for the rest. Ask for ``scan`` when the
   predicate may become false again (for example ``differ`` in a run that re-syncs).

Both skip the evaluation after events that cannot change the answer: when every path of the
predicate lives in the state of named nodes (``nodes/rank3/...``), only the events delivered to
those nodes can change it (a handler changes its own node only; replays enforce that), and the
recorded event stream says which events those are without running them.

The reverse and forward watchpoints (``last_change``, ``next_change``) are searches of the same
kind, in :mod:`timetravel.explore.watchpoints`; they share this module's budget and results.

The state after event #N is what a search looks at; at the recorded end it is the final state
(after end-of-run checks), so a failure recorded by an end-of-run oracle is found "at the end".

Every search is bounded (``events_max`` re-executed events), reports progress (a
:class:`~timetravel.explore.work.WorkProgress` (task ``search``, detail the phase) about
PROGRESS_REPORTS times, at most every PROGRESS_EVERY_EVENTS events) and stops when ``should_stop`` says so;
a stopped search says why in ``stopped_by`` and is not an answer.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from timetravel.explore.elided_values import reads_values
from timetravel.explore.paths import WORLD_PARTS, Path, select, world_tree
from timetravel.explore.predicates import Predicate, PredicateResult, parse_predicate
from timetravel.explore.results import FindResult
from timetravel.explore.stepper import Stepper, recorded_events, walk
from timetravel.explore.work import ProgressCallback, WorkProgress
from timetravel.sim.event import Event

if TYPE_CHECKING:
    from timetravel.explore.session import Session
    from timetravel.sim.world import World

SEARCH_EVENTS_MAX = 5_000_000
"""Events one search may re-execute; past it the search stops and says so (``stopped_by``)."""
PROGRESS_EVERY_EVENTS = 4096
PROGRESS_REPORTS = 50
"""A short search reports about this many times (a long one every PROGRESS_EVERY_EVENTS events)."""
STRATEGY_AUTO = "auto"
STRATEGY_BISECT = "bisect"
STRATEGY_SCAN = "scan"
STRATEGIES = (STRATEGY_AUTO, STRATEGY_BISECT, STRATEGY_SCAN)
STRATEGY_LAST_CHANGE = "last-change"
STRATEGY_NEXT_CHANGE = "next-change"
STOP_EVENTS_MAX = "events_max"
STOP_CANCELLED = "cancelled"
SEARCH_TASK = "search"
END_KIND = "end"
"""The ``kind`` a result names when the end-of-run checks (not an event) made the difference."""


class Stopped(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Hit:
    """A moment found: the state after event #``event``, with the paths that witness it."""

    event: int
    t_ns: int
    witnesses: tuple[str, ...]
    at_end: bool = False
    """The end-of-run checks (not an event) made the difference."""


class Search:
    """The budget, progress and steppers of one search."""

    def __init__(
        self,
        session: Session,
        events_max: int,
        progress: ProgressCallback | None,
        should_stop: Callable[[], bool] | None,
        total: int,
    ) -> None:
        self.session = session
        self.events_max = events_max
        self.progress = progress
        self.should_stop = should_stop
        self.total = max(total, 1)
        self.spent = 0
        self.snapshots_checked = 0
        self.phase = "snapshots"
        self._reported = 0
        self.report_every = max(1, min(PROGRESS_EVERY_EVENTS, self.total // PROGRESS_REPORTS))

    def _spend(self, count: int) -> None:
        self.spent += count
        if self.progress is not None and self.spent - self._reported >= self.report_every:
            self._reported = self.spent
            self.progress(WorkProgress(SEARCH_TASK, self.spent, max(self.total, self.spent), self.phase))
        self.check()

    def check(self) -> None:
        if self.should_stop is not None and self.should_stop():
            raise Stopped(STOP_CANCELLED)
        if self.spent > self.events_max:
            raise Stopped(STOP_EVENTS_MAX)

    def walk(self, stepper: Stepper, count: int) -> Stepper:
        """Advance ``stepper`` by ``count`` events, or just past the budget (which then stops the search)."""
        self.check()
        before = stepper.executed
        stepper = walk(stepper, min(count, self.events_max - self.spent + 1))
        self._spend(stepper.executed - before)
        return stepper

    def stepper_at(self, events: int) -> Stepper:
        stepper = Stepper.before(self.session, events)
        return self.walk(stepper, events - stepper.events)

    def snapshot_world(self, position: int) -> World:
        self.check()
        self.snapshots_checked += 1
        return self.session.snapshot_world(position)

    def final_world(self, stepper: Stepper | None = None) -> World:
        """The state at the recorded end: the final snapshot, or the end-of-run run on ``stepper``."""
        snapshots = self.session.snapshots()
        if snapshots and snapshots[-1].final:
            return self.snapshot_world(len(snapshots) - 1)
        stepper = stepper if stepper is not None else self.stepper_at(self.session.end.events)
        stepper.finish()
        return stepper.world


# -- evaluating predicates --------------------------------------------------------------------------


def parts_read(paths: list[Path]) -> frozenset[str] | None:
    """The world parts a set of paths reads (None: it may read any part)."""
    parts = set()
    for path in paths:
        if not path.segments or path.segments[0] not in WORLD_PARTS:
            return None
        parts.add(path.segments[0])
    return frozenset(parts)


def tree_for(world: World, paths: list[Path]) -> dict[str, Any]:
    """The part of the world tree that ``paths`` read (all of it when they may read anything)."""
    return partial_tree(world, parts_read(paths))


def partial_tree(world: World, parts: frozenset[str] | None) -> dict[str, Any]:
    """The world tree with only ``parts`` (the queue is sorted only when it is asked for)."""
    if parts is None or "queue" in parts:
        tree = world_tree(world)
        return tree if parts is None else {name: tree[name] for name in parts}
    return {name: getattr(world, name) for name in parts}


def _nodes_read(paths: list[Path]) -> frozenset[str] | None:
    """The nodes whose state holds every path (None: some path reads more than named nodes)."""
    nodes = set()
    for path in paths:
        segments = path.segments
        if len(segments) < 2 or segments[0] != "nodes" or segments[1] == "*":
            return None
        nodes.add(segments[1])
    return frozenset(nodes)


def _sparse_copy(tree: Any, paths: list[Path]) -> dict[str, Any]:
    """Deep copies of what ``paths`` select, at their concrete paths (the "before" of ``changed``)."""
    copied: dict[str, Any] = {}
    for path in paths:
        for concrete, value in select(tree, path):
            if not concrete:
                return dict(copy.deepcopy(tree))
            segments = concrete.split("/")
            node = copied
            for segment in segments[:-1]:
                node = node.setdefault(segment, {})
            node[segments[-1]] = copy.deepcopy(value)
    return copied


class _Evaluator:
    """A predicate bound to the parts it reads; keeps the previous point for ``changed``."""

    def __init__(self, predicate: Predicate) -> None:
        self.predicate = predicate
        self.paths = predicate.paths
        self.parts = parts_read(self.paths)
        self.nodes = _nodes_read(self.paths)
        self.previous: Any = None

    def relevant(self, event: Event | None) -> bool:
        return self.nodes is None or event is None or event.dst in self.nodes

    def __call__(self, world: World) -> PredicateResult:
        tree = partial_tree(world, self.parts)
        result = self.predicate.evaluate(tree, self.previous)
        if self.predicate.uses_changed:
            self.previous = _sparse_copy(tree, self.paths)
        return result


# -- find_first -------------------------------------------------------------------------------------


@reads_values
def find_first(
    session: Session,
    predicate: str | Predicate,
    *,
    start_events: int = 0,
    strategy: str = STRATEGY_AUTO,
    events_max: int = SEARCH_EVENTS_MAX,
    progress: ProgressCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> FindResult:
    """The first state at or after event #``start_events`` where ``predicate`` holds (module docstring)."""
    parsed = parse_predicate(predicate) if isinstance(predicate, str) else predicate
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown search strategy {strategy!r} (known: {', '.join(STRATEGIES)})")
    if strategy == STRATEGY_AUTO:
        strategy = STRATEGY_SCAN if parsed.uses_changed or parsed.uses_equality else STRATEGY_BISECT
    end_events = session.end.events
    start_events = min(max(start_events, 0), end_events)
    search = Search(session, events_max, progress, should_stop, end_events - start_events)
    evaluate = _Evaluator(parsed)
    hit: Hit | None = None
    stopped_by = None
    try:
        if strategy == STRATEGY_SCAN:
            hit = _scan(search, evaluate, start_events)
        else:
            hit = _bisect(search, evaluate, start_events)
    except Stopped as stop:
        stopped_by = stop.reason
    return find_result(session, parsed.text, hit, search, strategy, stopped_by)


def find_result(
    session: Session,
    expression: str,
    hit: Hit | None,
    search: Search,
    strategy: str,
    stopped_by: str | None,
) -> FindResult:
    node = kind = None
    if hit is not None and hit.at_end:
        kind = END_KIND
    elif hit is not None and hit.event > 0:
        recorded = session.event(hit.event)
        if recorded is not None:
            node, kind = recorded.node, recorded.kind
    return FindResult(
        expression=expression,
        branch=session.branch,
        found=hit is not None,
        t_ns=hit.t_ns if hit is not None else None,
        event=hit.event if hit is not None else None,
        witnesses=hit.witnesses if hit is not None else (),
        replayed_events=search.spent,
        node=node,
        kind=kind,
        strategy=strategy,
        snapshots_checked=search.snapshots_checked,
        stopped_by=stopped_by,
    )


def _state_at_start(search: Search, start_events: int) -> tuple[Stepper | None, World]:
    """The world at #``start_events`` (the final state when that is the recorded end)."""
    if start_events >= search.session.end.events:
        return None, search.final_world()
    stepper = search.stepper_at(start_events)
    return stepper, stepper.world


def _hit_here(world: World, result: PredicateResult, at_end: bool = False) -> Hit:
    return Hit(world.events_processed, world.t_ns, result.witnesses, at_end)


def _bisect(search: Search, evaluate: _Evaluator, start_events: int) -> Hit | None:
    session = search.session
    stepper, world = _state_at_start(search, start_events)
    result = evaluate(world)
    if result.holds:
        return _hit_here(world, result, at_end=stepper is None)
    snapshots = session.snapshots()
    points = [index for index, snapshot in enumerate(snapshots) if snapshot.events > start_events]
    low, high = -1, len(points)
    while high - low > 1:
        middle = (low + high) // 2
        if evaluate(search.snapshot_world(points[middle])).holds:
            high = middle
        else:
            low = middle
    low_events = snapshots[points[low]].events if low >= 0 else start_events
    if high == len(points):
        if points and snapshots[points[-1]].final:
            return None
        return _first_in_interval(search, evaluate, low_events, session.end.events, final=True)
    high_snapshot = snapshots[points[high]]
    return _first_in_interval(search, evaluate, low_events, high_snapshot.events, final=high_snapshot.final)


def _first_in_interval(
    search: Search, evaluate: _Evaluator, low_events: int, high_events: int, *, final: bool
) -> Hit | None:
    """The first event in (low, high] after which the (monotone) predicate holds; with ``final``,
    the end-of-run state at ``high`` counts too."""
    search.phase = "events"
    size = high_events - low_events
    chunk = max(1, math.isqrt(size))
    stepper = search.stepper_at(low_events)
    chunk_start = low_events
    while stepper.events < high_events:
        chunk_start = stepper.events
        stepper = search.walk(stepper, min(chunk, high_events - stepper.events))
        if stepper.events == chunk_start:
            break
        if evaluate(stepper.world).holds:
            return _first_event(search, evaluate, chunk_start, stepper.events)
    if final and stepper.at_end():
        world = search.final_world(stepper)
        result = evaluate(world)
        if result.holds:
            return Hit(world.events_processed, world.t_ns, result.witnesses, at_end=True)
    return None


def _first_event(search: Search, evaluate: _Evaluator, after_events: int, by_events: int) -> Hit | None:
    """Event by event in (after, by]: the first after which the predicate holds."""
    stepper = search.stepper_at(after_events)
    while stepper.events < by_events:
        stepper = search.walk(stepper, 1)
        if not evaluate.relevant(stepper.last_event()):
            continue
        result = evaluate(stepper.world)
        if result.holds:
            return _hit_here(stepper.world, result)
    return None


def _scan(search: Search, evaluate: _Evaluator, start_events: int) -> Hit | None:
    search.phase = "events"
    if evaluate.predicate.uses_changed and 0 < start_events < search.session.end.events:
        # changed() at the start compares with the state before it: start one event earlier
        stepper = search.stepper_at(start_events - 1)
        evaluate(stepper.world)
        stepper = search.walk(stepper, 1)
        world = stepper.world
        relevant = evaluate.relevant(stepper.last_event())
        result = evaluate(world) if relevant else PredicateResult(False)
    else:
        maybe_stepper, world = _state_at_start(search, start_events)
        result = evaluate(world)
        if maybe_stepper is None:
            return _hit_here(world, result, at_end=True) if result.holds else None
        stepper = maybe_stepper
    if result.holds:
        return _hit_here(world, result)
    while not stepper.at_end():
        before = stepper.events
        stepper = search.walk(stepper, events_to_next_relevant(search.session, evaluate.nodes, before))
        if stepper.events == before:
            break
        result = evaluate(stepper.world)
        if result.holds:
            return _hit_here(stepper.world, result)
    if stepper.at_end():
        world = search.final_world(stepper)
        result = evaluate(world)
        if result.holds:
            return Hit(world.events_processed, world.t_ns, result.witnesses, at_end=True)
    return None


def events_to_next_relevant(session: Session, nodes: frozenset[str] | None, after: int) -> int:
    """How many events to run from #``after`` to the next one delivered to ``nodes`` (all: 1)."""
    if nodes is None:
        return 1
    for number, event in recorded_events(session, after + 1, session.end.events):
        if event.dst in nodes:
            return number - after
    return max(session.end.events - after, 1)
