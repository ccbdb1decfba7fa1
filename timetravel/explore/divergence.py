"""First divergence: the first event at which two runs of one scenario behave differently.

Two runs (two branches of a recording, or a recording and a fresh rerun) are identical up to the
event where their histories part (a branch's fork; event #0 for a rerun). From there:

1. **Bisect snapshots.** At the event counts where both runs have a recorded snapshot, their
   effects (:func:`~timetravel.explore.effects.effects_key`: what the run did, not what it was
   asked) are compared — first by the manifests' ``effects_hash``, and when those differ by
   restoring both worlds. Once two runs differ they stay different, so a binary search finds the
   last snapshot where they still agree, in O(log n) restores and no re-execution.
2. **Step event by event** from there, both worlds side by side on today's code. Events are
   matched by ``(t, kind, dst, payload digest)``, never by ``seq``. The first event whose key has
   no match on the other side, or whose effects differ (:func:`effects_difference`), is the
   first divergence; the result names its time, node, kind and each side's ``seq`` and event
   number, says why, and carries the diff of the two worlds right after it (effects only:
   config, faults and choice keys differ on purpose and are left out). A scenario may say when
   the divergence happened in its own terms (``Scenario.divergence_t_ns``): a torch run's
   ``t_ns`` is the completion time of the first collective whose results differ, and
   ``event_t_ns`` the time of the event that completed it (its last member's entry).

A :class:`RunSide` is what the search needs from a run: its world at an event count, the choice
overrides in force there, its snapshots, and the Simulation that re-executes its worlds (a
recorded side's through its session's world source, explore/world_source.py). :class:`RecordedSide` reads a branch of a recording;
:class:`FreshSide` runs a scenario from its initial world (for rerun).
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from timetravel.explore.compare_results import Divergence
from timetravel.explore.diff import diff as structural_diff
from timetravel.explore.effects import (
    END_KIND,
    StepEffects,
    Stepper,
    effects_difference,
    effects_key,
    event_key,
)
from timetravel.explore.paths import world_tree
from timetravel.explore.session import Session
from timetravel.explore.session_data import lineage
from timetravel.explore.tracks import open_track, overrides_of, shared_events
from timetravel.explore.work import ProgressCallback, StopCheck, WorkProgress, WorkStopped
from timetravel.recording.catalog import ManifestInfo
from timetravel.scenarios import UnknownScenarioError, get_scenario
from timetravel.sim.choices import Overrides
from timetravel.sim.kernel import Simulation
from timetravel.sim.launch import NO_LAUNCH, Launch
from timetravel.sim.runner import build_world
from timetravel.sim.scenario import Scenario
from timetravel.sim.world import World
from timetravel.snapshot.restore import restore
from timetravel.snapshot.store import Snapshot, SnapshotStore

STEP_EVENTS_MAX = 5_000_000
"""Events stepped side by side before the search gives up (it reports how far it got)."""
STEP_PROGRESS_EVENTS = 4_096
DIVERGENCE_CHANGES_MAX = 50
"""Changes of the diff kept in a Divergence (the rest are counted in its reason)."""
FRESH_CACHE_ENTRIES_MAX = 32
EFFECTS_TREE_EXCLUDED = ("config", "faults", "seed", "branch_key", "choices", "seq")


class RunSide:
    """One run to compare. Subclasses say how to get its worlds."""

    name: str
    scenario: Scenario
    determinism: str | None

    def world_at(self, events: int) -> World:
        """An independent World after event #``events``."""
        raise NotImplementedError

    def overrides_at(self, events: int) -> Overrides | None:
        raise NotImplementedError

    def manifests(self) -> dict[int, ManifestInfo]:
        """Recorded snapshots by event count (non-final ones)."""
        return {}

    def probe_events(self) -> set[int] | None:
        """Event counts at which the world is cheap to get (None: at any count, computed)."""
        return set(self.manifests())

    def manifest_effects(self, info: ManifestInfo) -> str | None:
        return None

    def world_at_manifest(self, info: ManifestInfo) -> World:
        return self.world_at(info.events)

    def simulation(self, world: World, **options: Any) -> Simulation:
        """A Simulation over one of this run's worlds (Simulation's keyword options)."""
        return Simulation(self.scenario, world, **options)

    def stepper(self, events: int) -> Stepper:
        """This run's world after event #``events``, stepped one event at a time on today's code."""
        world = _world(self, events)
        return Stepper(
            world,
            self.simulation(
                world, overrides=self.overrides_at(events) or None, chain=False, determinism=self.determinism
            ),
        )


class RecordedSide(RunSide):
    """A branch of an open recording (its snapshots are data; stepping re-executes it)."""

    def __init__(self, session: Session, name: str) -> None:
        self.session = session
        self.name = name
        self.scenario = session.scenario
        self.determinism = session.determinism
        self.track = open_track(session, name)
        infos, _batches, _fork = lineage(session.reader, name)
        self._manifests = {info.events: info for info in infos if not info.final}

    def world_at(self, events: int) -> World:
        self.track.goto_event(events)
        return self.track.world_copy()

    def overrides_at(self, events: int) -> Overrides | None:
        return overrides_of(self.session.reader, self.name, events) or None

    def manifests(self) -> dict[int, ManifestInfo]:
        return self._manifests

    def manifest_effects(self, info: ManifestInfo) -> str | None:
        value = self.session.reader.manifest(info).get("effects_hash")
        return value if isinstance(value, str) else None

    def world_at_manifest(self, info: ManifestInfo) -> World:
        return self.track.restore_world(info)

    def simulation(self, world: World, **options: Any) -> Simulation:
        return self.track.simulation(world, **options)


class FreshSide(RunSide):
    """A scenario run from its initial world on today's code (``rerun``): worlds by running forward
    from the nearest world it kept (at most FRESH_CACHE_ENTRIES_MAX of them)."""

    def __init__(
        self,
        name: str,
        scenario: Scenario,
        config: dict[str, Any],
        seed: int,
        *,
        branch_key: int = 0,
        overrides: Overrides | None = None,
        determinism: str | None = None,
        simulation_factory: Callable[..., Simulation] | None = None,
        launch: Launch = NO_LAUNCH,
    ) -> None:
        """``simulation_factory(world, **options)``: how its worlds are re-executed (``rerun`` passes
        its session's ``simulation``, so the session's world source runs today's code too);
        ``launch``: what the user named (its session's: sim/launch.py), for building its first world."""
        self.launch = launch
        self.name = name
        self.scenario = scenario
        self._simulation_factory = simulation_factory
        self.config = config
        self.seed = seed
        self.branch_key = branch_key
        self.overrides = overrides or None
        self.determinism = determinism
        self._kept: dict[int, Snapshot] = {}

    def initial_world(self) -> World:
        world = build_world(self.scenario, dict(self.config), self.seed, self.launch)
        world.branch_key = self.branch_key
        return world

    def world_at(self, events: int) -> World:
        starts = sorted(count for count in self._kept if count <= events)
        world = restore(self._kept[starts[-1]], verify=False) if starts else self.initial_world()
        if events > world.events_processed:
            simulation = self.simulation(
                world, overrides=self.overrides, chain=False, determinism=self.determinism
            )
            simulation.run(max_events=events - world.events_processed)
        if len(self._kept) < FRESH_CACHE_ENTRIES_MAX:
            self._kept[world.events_processed] = SnapshotStore(bytes_max=0).take(world)
        return world

    def overrides_at(self, events: int) -> Overrides | None:
        return self.overrides

    def simulation(self, world: World, **options: Any) -> Simulation:
        if self._simulation_factory is not None:
            return self._simulation_factory(world, **options)
        return Simulation(self.scenario, world, **options)

    def probe_events(self) -> set[int] | None:
        return None


@dataclass
class Search:
    """Two runs being compared, and how the search reports progress and is stopped."""

    a: RunSide
    b: RunSide
    progress: ProgressCallback | None
    should_stop: StopCheck | None

    def report(self, done: int, total: int, detail: str = "") -> None:
        if self.progress is not None:
            self.progress(WorkProgress("divergence", done, total, detail))
        if self.should_stop is not None and self.should_stop():
            raise WorkStopped("the divergence search was stopped")


def equal_effects(a: RunSide, b: RunSide, events: int) -> bool:
    """Whether two runs agree in effects after event #``events`` (manifests first, then worlds)."""
    info_a, info_b = a.manifests().get(events), b.manifests().get(events)
    if info_a is not None and info_b is not None:
        effects_a, effects_b = a.manifest_effects(info_a), b.manifest_effects(info_b)
        if effects_a is not None and effects_a == effects_b:
            return True
    world_a = a.world_at_manifest(info_a) if info_a is not None else a.world_at(events)
    world_b = b.world_at_manifest(info_b) if info_b is not None else b.world_at(events)
    return world_a.events_processed == world_b.events_processed == events and effects_key(
        world_a
    ) == effects_key(world_b)


def last_agreeing(search: Search, start: int, points: list[int]) -> int:
    """The largest of ``points`` at which the runs still agree (``start`` when none does)."""
    low, high = -1, len(points)
    probes = 0
    total = max(1, len(points).bit_length())
    while high - low > 1:
        middle = (low + high) // 2
        probes += 1
        search.report(probes, total, f"bisecting snapshots: #{points[middle]}")
        if equal_effects(search.a, search.b, points[middle]):
            low = middle
        else:
            high = middle
    return points[low] if low >= 0 else start


def first_divergence_between(
    a: RunSide,
    b: RunSide,
    start: int,
    *,
    limit_events: int | None = None,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
) -> Divergence | None:
    """The first divergence of two runs identical up to event #``start`` (see the module docstring).

    ``limit_events``: stop stepping after this event number (the runs' ends), None for no limit.
    """
    search = Search(a, b, progress, should_stop)
    common = sorted(count for count in _probe_points(a, b) if count > start)
    if limit_events is not None:
        common = [count for count in common if count <= limit_events]
    origin = last_agreeing(search, start, common)
    after = bisect.bisect_right(common, origin)
    next_point = common[after] if after < len(common) else limit_events
    return _step(search, origin, next_point)


def _probe_points(a: RunSide, b: RunSide) -> set[int]:
    """Where both runs' worlds are at hand: the snapshots of both (or of the recorded one)."""
    points_a, points_b = a.probe_events(), b.probe_events()
    if points_a is None:
        return points_b or set()
    if points_b is None:
        return points_a
    return points_a & points_b


def _world(side: RunSide, events: int) -> World:
    info = side.manifests().get(events)
    return side.world_at_manifest(info) if info is not None else side.world_at(events)


def _step(search: Search, origin: int, expected_by: int | None) -> Divergence | None:
    a, b = search.a, search.b
    stepper_a, stepper_b = a.stepper(origin), b.stepper(origin)
    total = max((expected_by or origin) - origin, 1)
    for count in range(STEP_EVENTS_MAX):
        if count % STEP_PROGRESS_EVENTS == 0:
            search.report(min(count, total), total, f"stepping from #{origin}")
        if stepper_a.finished and stepper_b.finished:
            return None
        mismatch = _stream_mismatch(stepper_a, stepper_b)
        if mismatch is not None:
            return _with_diff(mismatch, stepper_a, stepper_b)
        step_a, step_b = stepper_a.step(), stepper_b.step()
        reason = effects_difference(step_a, step_b)
        if reason is not None:
            return _divergence(step_a, step_b, reason, stepper_a.world, stepper_b.world)
    raise WorkStopped(f"no divergence within {STEP_EVENTS_MAX} events stepped from #{origin}")


def _stream_mismatch(stepper_a: Stepper, stepper_b: Stepper) -> Divergence | None:
    """A divergence when the next events differ (or one run has ended or failed and the other not)."""
    next_a, next_b = _next(stepper_a), _next(stepper_b)
    if next_a is None and next_b is None:
        return None
    if next_a is not None and next_b is not None and event_key(next_a) == event_key(next_b):
        return None
    first_a = next_b is None or (next_a is not None and next_a[0] <= next_b[0])
    event, other = (next_a, next_b) if first_a else (next_b, next_a)
    assert event is not None
    pair = other if other is not None and other[0] == event[0] else None
    numbers = (stepper_a.world.events_processed + 1, stepper_b.world.events_processed + 1)
    side, other_side = ("a", "b") if first_a else ("b", "a")
    if pair is not None:
        reason = f"at the same time {side} runs {_name(event)} and {other_side} runs {_name(pair)}"
    elif other is None:
        ended = _what_ended(stepper_b if first_a else stepper_a)
        reason = f"{side} runs {_name(event)}; {other_side} {ended}"
    else:
        reason = f"{side} runs {_name(event)}, which {other_side} does not run at that time"
    mine = (_seq(event), numbers[0] if first_a else numbers[1])
    theirs = (_seq(pair), numbers[1] if first_a else numbers[0]) if pair is not None else (None, None)
    (seq_a, event_a), (seq_b, event_b) = (mine, theirs) if first_a else (theirs, mine)
    return Divergence(
        t_ns=event[0],
        node=event[2],
        kind=event[3],
        seq_a=seq_a,
        seq_b=seq_b,
        event_a=event_a,
        event_b=event_b,
        reason=reason,
    )


def _with_diff(found: Divergence, stepper_a: Stepper, stepper_b: Stepper) -> Divergence:
    """The divergence with the diff after the side (or sides) that run the reported event ran it."""
    if found.event_a is not None:
        stepper_a.step()
    if found.event_b is not None:
        stepper_b.step()
    return dataclasses.replace(found, changes=effects_diff(stepper_a.world, stepper_b.world))


def _name(event: Any) -> str:
    if event[3] == END_KIND and event[1] == -1:
        return "its end-of-run checks (its queue drained)"
    return f"{event[3]} on {event[2]}"


def _seq(event: Any) -> int | None:
    return None if event is None or event[1] < 0 else int(event[1])


def _next(stepper: Stepper) -> Any:
    """The next event, or the end-of-run pseudo event when the queue has drained (None: finished)."""
    if stepper.finished:
        return None
    event = stepper.peek()
    if event is not None:
        return event
    return (stepper.world.t_ns, -1, "", END_KIND, None)


def _what_ended(stepper: Stepper) -> str:
    if stepper.world.failures:
        return f"has failed already ({stepper.world.failures[0].get('signature')})"
    return "has ended"


def _divergence(a: StepEffects, b: StepEffects, reason: str, world_a: World, world_b: World) -> Divergence:
    changes = effects_diff(world_a, world_b)
    kind = a.event[3]
    said = _in_scenario_terms(world_a, world_b, changes)
    if said:
        reason = f"{reason}: {said}"
    t_ns, event_t_ns = a.event[0], None
    moment = _scenario_moment(world_a, world_b, changes)
    if moment is not None and moment > t_ns:
        t_ns, event_t_ns = moment, a.event[0]
    return Divergence(
        t_ns=t_ns,
        event_t_ns=event_t_ns,
        node=a.event[2],
        kind=kind,
        seq_a=a.event[1] if kind != END_KIND else None,
        seq_b=b.event[1] if kind != END_KIND else None,
        event_a=a.number,
        event_b=b.number,
        reason=reason,
        changes=changes,
    )


def _scenario_of(world: World) -> Scenario | None:
    try:
        return get_scenario(world.scenario)
    except UnknownScenarioError:
        return None


def _in_scenario_terms(world_a: World, world_b: World, changes: tuple[dict[str, Any], ...]) -> str | None:
    """The scenario's own sentence for this divergence (``Scenario.describe_divergence``), if it has one."""
    describe = getattr(_scenario_of(world_a), "describe_divergence", None)
    return describe(world_a, world_b, changes) if describe is not None else None


def _scenario_moment(world_a: World, world_b: World, changes: tuple[dict[str, Any], ...]) -> int | None:
    """The scenario's own time for this divergence (``Scenario.divergence_t_ns``: a torch run's is the
    completion of the first collective whose results differ), or None: the diverging event's time."""
    moment = getattr(_scenario_of(world_a), "divergence_t_ns", None)
    return moment(world_a, world_b, changes) if moment is not None else None


def comparable_tree(world: World, excluded: tuple[str, ...] = ()) -> dict[str, Any]:
    """The world's tree for diffs: pending events without ``seq`` (a branch's added events shift
    every later seq), and without the parts in ``excluded``."""
    tree = world_tree(world)
    tree["queue"] = [{key: value for key, value in event.items() if key != "seq"} for event in tree["queue"]]
    return {key: value for key, value in tree.items() if key not in excluded and key != "seq"}


def effects_diff(world_a: World, world_b: World) -> tuple[dict[str, Any], ...]:
    """The diff of two worlds' effects (config, faults and choice keys left out), bounded."""
    result = structural_diff(
        comparable_tree(world_a, EFFECTS_TREE_EXCLUDED),
        comparable_tree(world_b, EFFECTS_TREE_EXCLUDED),
        changes_max=DIVERGENCE_CHANGES_MAX,
    )
    return tuple({"path": c.path, "change": c.change, "summary": c.summary} for c in result.changes)


def first_divergence(
    session: Session,
    a: str,
    b: str,
    *,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
) -> Divergence | None:
    """The first divergence of two branches of ``session``'s recording (None: they behave alike)."""
    reader = session.reader
    start = shared_events(reader, a, b)
    side_a, side_b = RecordedSide(session, a), RecordedSide(session, b)
    if start is None:
        return None
    limit = max(side_a.track.end.events, side_b.track.end.events)
    return first_divergence_between(
        side_a, side_b, start, limit_events=limit, progress=progress, should_stop=should_stop
    )
