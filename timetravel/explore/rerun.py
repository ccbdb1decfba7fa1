"""Rerun: the recorded inputs on today's code — "did my fix fix it?".

``rerun(session, settings)`` builds the recorded run again from its scenario's *current* code with

* the recorded **seed** and branch key, and the recorded **config** (``settings``, ``key=value``,
  change any key: the run starts from scratch, so nothing needs to be branchable);
* the recorded **fault schedule**, pinned: for a scenario with a ``faults`` config key the
  schedule the recording started with (every record, with its id) becomes an explicit
  ``faults`` list, so a schedule that was drawn (``swarm``) is the same even if today's drawing
  code is not — unless ``settings`` sets ``faults`` itself;
* the recorded **choices**, matched by site. When the recording has a choice log (``run
  --record-choices``) every logged choice is pinned as an override at its (node, site, index),
  so a site whose bound or stream changed still gets the recorded value (modulo its bound) and a
  new site draws fresh (``choices: log``). Without a log, the recorded seed alone decides them:
  a choice is a pure function of (seed, branch key, node, site, index), so today's code draws the
  recorded values wherever it draws at the same site and index with the same bound
  (``choices: seed``).

It runs to the end (or the recorded ``--until`` time) and reports today's outcome next to the
recorded one, with the **first divergence from the recording**:

* when the code is unchanged (same code fingerprint; e.g. ``--set bug=none``), exactly: the
  recording is re-executed beside the rerun and :mod:`.divergence` names the first event whose
  effects differ;
* when the code changed, the recorded side cannot be re-executed, so the rerun is compared with
  what the recording holds: snapshot states are bisected, then the rerun's events are matched
  one by one against the recorded events. A difference in the event stream is exact; a
  difference only in state is located at the first event since the last agreeing snapshot on a
  node whose state differs (the reason says so, since the recording keeps no per-event state).
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from typing import Any

from timetravel.explore.compare_results import Divergence, RerunResult
from timetravel.explore.divergence import (
    FreshSide,
    RecordedSide,
    Search,
    first_divergence_between,
    last_agreeing,
)
from timetravel.explore.effects import event_key
from timetravel.explore.replay import CAUSE_CODE_CHANGED, classify
from timetravel.explore.results import public_failure
from timetravel.explore.session import Session
from timetravel.explore.session_data import overrides_from
from timetravel.explore.work import (
    ExploreError,
    ProgressCallback,
    StopCheck,
    WorkProgress,
    WorkStopped,
    events_bound,
    outcome_of,
    run_bounded,
)
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.sim.choices import Overrides
from timetravel.sim.encoding import digest
from timetravel.sim.world import World

FAULTS_KEY = "faults"
CHOICE_LOG_ENTRIES_MAX = 5_000_000
"""Logged choices a rerun pins (each costs ~200 bytes as an override)."""
CHOICES_FROM_LOG = "log"
CHOICES_FROM_SEED = "seed"


def rerun_config(session: Session, settings: Iterable[str]) -> tuple[dict[str, Any], int]:
    """The recorded config with ``settings`` applied and the recorded schedule pinned; the number
    of fault records pinned."""
    scenario = session.scenario
    config = dict(session.header["config"])
    changed: set[str] = set()
    for setting in settings:
        name, equals, text = setting.partition("=")
        if not equals or not name.strip():
            raise ExploreError(f"--set expects key=value, got {setting!r}")
        config[name.strip()] = scenario.param(name.strip()).parse(text)
        changed.add(name.strip())
    pinned = 0
    if FAULTS_KEY not in changed and any(param.name == FAULTS_KEY for param in scenario.params):
        schedule = recorded_schedule(session)
        if schedule:
            config[FAULTS_KEY] = schedule
            pinned = len(schedule)
    return config, pinned


def recorded_schedule(session: Session) -> list[dict[str, Any]]:
    """The fault schedule main started with (from its first snapshot: data, nothing re-executed)."""
    infos = session.reader.manifests(MAIN_BRANCH)
    if not infos or infos[0].events != 0:
        return []
    world = session.restore_world(infos[0])
    return [dict(record) for record in world.faults if isinstance(record, dict)]


def rerun_overrides(session: Session) -> tuple[Overrides, str]:
    """The recorded overrides, plus every logged choice when there is a log; and which it was."""
    reader = session.reader
    overrides = overrides_from(reader.header.get("overrides", []))
    logged = sum(count for _first, count, _offset in reader.catalog.choices.get(MAIN_BRANCH, []))
    if not logged:
        return overrides, CHOICES_FROM_SEED
    if logged > CHOICE_LOG_ENTRIES_MAX:
        raise ExploreError(
            f"the recording logs {logged} choices; a rerun pins at most {CHOICE_LOG_ENTRIES_MAX}"
        )
    for node, site, index, value in reader.choices(MAIN_BRANCH):
        overrides.setdefault((str(node), str(site), int(index)), int(value))
    return overrides, CHOICES_FROM_LOG


def rerun(
    session: Session,
    settings: Iterable[str] = (),
    *,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
) -> RerunResult:
    """Today's outcome of the recorded inputs, and its first divergence from the recording."""
    settings = tuple(settings)
    header = session.header
    config, pinned = rerun_config(session, settings)
    overrides, choices = rerun_overrides(session)
    fresh = FreshSide(
        "rerun",
        session.scenario,
        config,
        int(header["seed"]),
        branch_key=int(header.get("branch_key", 0)),
        overrides=overrides,
        determinism=session.determinism,
        simulation_factory=session.simulation,
        launch=session.launch,
    )
    recorded_end = session.reader.end(MAIN_BRANCH) or {}
    main_events = int(recorded_end.get("events", session.end.events))
    world, outcome, failure = _run(fresh, session, main_events, progress, should_stop)
    limit = max(main_events, world.events_processed)
    if classify(header, session.scenario) == CAUSE_CODE_CHANGED:
        divergence = divergence_from_data(session, fresh, limit, progress, should_stop)
    else:
        divergence = first_divergence_between(
            RecordedSide(session, MAIN_BRANCH),
            fresh,
            0,
            limit_events=limit,
            progress=progress,
            should_stop=should_stop,
        )
    return RerunResult(
        outcome=outcome,
        failure=public_failure(failure),
        recorded_outcome=str(recorded_end.get("outcome") or "unknown"),
        recorded_failure=public_failure(recorded_end.get("failure")),
        settings=settings,
        first_divergence=divergence,
        events=world.events_processed,
        choices=choices,
        faults_pinned=pinned,
    )


def _run(
    fresh: FreshSide,
    session: Session,
    main_events: int,
    progress: ProgressCallback | None,
    should_stop: StopCheck | None,
) -> tuple[World, str, dict[str, Any] | None]:
    world = fresh.initial_world()
    simulation = fresh.simulation(
        world, overrides=fresh.overrides, chain=False, determinism=fresh.determinism
    )
    end = session.reader.end(MAIN_BRANCH) or {}
    until_ns = int(end["t_end_ns"]) if end.get("stop") == "until" else None
    events_max = events_bound(main_events)

    def report(events: int) -> None:
        if progress is not None:
            progress(WorkProgress("rerun", events, max(main_events, 1)))

    result = run_bounded(
        simulation.run,
        world,
        until_ns=until_ns,
        events_max=events_max,
        should_stop=should_stop,
        on_chunk=report,
    )
    if result is None:
        raise WorkStopped("the rerun was stopped")
    failure = result.failure
    return world, outcome_of(result, events_max), dict(failure) if failure else None


def divergence_from_data(
    session: Session,
    fresh: FreshSide,
    limit: int,
    progress: ProgressCallback | None,
    should_stop: StopCheck | None,
) -> Divergence | None:
    """The rerun against the recording's data alone (the code changed; see the module docstring)."""
    recorded = RecordedSide(session, MAIN_BRANCH)
    points = sorted(count for count in recorded.manifests() if 0 < count <= limit)
    search = Search(recorded, fresh, progress, should_stop)
    origin = last_agreeing(search, 0, points)
    after = bisect.bisect_right(points, origin)
    next_point = points[after] if after < len(points) else None
    return _match_events(recorded, fresh, origin, next_point, limit)


def _match_events(
    recorded: RecordedSide, fresh: FreshSide, origin: int, next_point: int | None, limit: int
) -> Divergence | None:
    """Match the rerun's events with the recorded ones from ``origin``; at ``next_point`` (the first
    snapshot that differs) compare node states; when no node differs there (the difference is in
    pending events or the fabric), keep matching events to ``limit``."""
    world = fresh.world_at(origin)
    simulation = fresh.simulation(
        world, overrides=fresh.overrides, chain=False, determinism=fresh.determinism
    )
    number = origin
    for last in (next_point, limit):
        if last is None:
            continue
        while number < last:
            number += 1
            want = recorded.track.event(number)
            got = world.queue[0] if world.queue and not world.failures else None
            if want is None and got is None:
                return None
            want_key = None if want is None else (want.t_ns, want.kind, want.node, digest(want.payload))
            if got is None or want_key is None or event_key(got) != want_key:
                return _stream_divergence(number, want, got)
            simulation.run(max_events=1)
        if last == next_point:
            found = _state_divergence(recorded, world, origin, last)
            if found is not None:
                return found
    return None


def _stream_divergence(number: int, want: Any, got: Any) -> Divergence:
    if got is None:
        return Divergence(
            want.t_ns,
            want.node,
            want.kind,
            want.seq,
            None,
            number,
            None,
            f"the recording runs {want.kind} on {want.node} at event #{number}; today's run has ended or failed",
        )
    if want is None:
        reason = f"the recording ends before event #{number}; today's code runs {got[3]} on {got[2]}"
    elif (want.kind, want.node, want.t_ns) == (got[3], got[2], got[0]):
        reason = f"event #{number}, {got[3]} on {got[2]}, carries another payload today"
    else:
        reason = (
            f"the recording runs {want.kind} on {want.node} at t={want.t_ns} ns; today's code runs "
            f"{got[3]} on {got[2]} at t={got[0]} ns (event #{number})"
        )
    return Divergence(
        got[0],
        got[2],
        got[3],
        want.seq if want is not None else None,
        got[1],
        number if want is not None else None,
        number,
        reason,
    )


def _state_divergence(recorded: RecordedSide, world: World, origin: int, point: int) -> Divergence | None:
    """The events agree through ``point`` but the states there do not: the first event since
    ``origin`` on a node whose state differs (None when no node state differs)."""
    expected = recorded.world_at_manifest(recorded.manifests()[point])
    differing = [
        name for name, state in world.nodes.items() if digest(state) != digest(expected.nodes.get(name))
    ]
    for number in range(origin + 1, point + 1):
        event = recorded.track.event(number)
        if event is not None and event.node in differing:
            return Divergence(
                event.t_ns,
                event.node,
                event.kind,
                event.seq,
                event.seq,
                number,
                number,
                f"the state of {event.node} differs at snapshot #{point}; the recording keeps no per-event "
                f"state, so this is the first event on {event.node} since the last agreeing snapshot #{origin}",
            )
    return None
