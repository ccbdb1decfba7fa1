"""Fan out: many futures from one moment, and the failure likelihood along a run.

``fanout(session, at, samples)`` forks the world at ``at`` once and runs ``samples`` futures of
it, each with its own branch key (1, 2, 3, … skipping the parent's own key, so ``branch
--branch-seed K`` reproduces sample K), to the end or a failure. It reports the failure rate and
how the outcomes bucket by failure signature (``pass`` counts the passing futures,
``unfinished`` those stopped by the event bound). Futures are not stored unless ``store=True``,
which records each as a branch (``b1``, ``b2``, …) at the cost of writing it.

``likelihood(session, samples)`` runs a fan-out from every snapshot of a branch before its end
(at most ``points_max`` of them, evenly spaced; ``start``/``end`` narrow it to a window). Where the rate reaches 1 and stays there is the
**point of no return**: from then on every future fails, so the damage is already in the state
rather than in the interleavings still to come. The cost is points × samples × a future's length;
``progress`` reports each future and ``should_stop`` ends the work with the points done so far.
"""

from __future__ import annotations

from dataclasses import dataclass

from timetravel.explore.branching import BranchChanges, branch, fork_track
from timetravel.explore.results import FanoutResult, LikelihoodResult
from timetravel.explore.session import Session
from timetravel.explore.tracks import overrides_of, track_on
from timetravel.explore.work import (
    OUTCOME_UNFINISHED,
    ExploreError,
    ProgressCallback,
    StopCheck,
    WorkProgress,
    WorkStopped,
    events_bound,
    outcome_of,
    run_bounded,
)
from timetravel.sim.timefmt import parse_time
from timetravel.snapshot.restore import restore
from timetravel.snapshot.store import Snapshot, SnapshotStore

SAMPLES_DEFAULT = 20
SAMPLES_MAX = 10_000
LIKELIHOOD_SAMPLES_DEFAULT = 10
LIKELIHOOD_POINTS_MAX = 64
PASS = "pass"


def branch_keys(samples: int, parent_key: int) -> list[int]:
    """The branch keys of ``samples`` futures: 1, 2, 3, … without the parent's own key."""
    keys: list[int] = []
    key = 1
    while len(keys) < samples:
        if key != parent_key:
            keys.append(key)
        key += 1
    return keys


@dataclass
class _Fork:
    """One moment to fan out from: the parent's track there, its world kept as a snapshot."""

    track: Session
    snapshot: Snapshot
    branch_key: int


def _fork(session: Session, at: int | str | None, parent: str | None) -> _Fork:
    track = fork_track(session, at, parent)
    track.source.before_copy(track.world)  # a source with external state keeps what copies need
    snapshot = SnapshotStore(bytes_max=0).take(track.world)
    return _Fork(track, snapshot, track.world.branch_key)


def _check_samples(samples: int) -> None:
    if type(samples) is not int or not 1 <= samples <= SAMPLES_MAX:
        raise ExploreError(f"samples must be an integer in [1, {SAMPLES_MAX}], got {samples!r}")


def fanout(
    session: Session,
    at: int | str | None,
    samples: int = SAMPLES_DEFAULT,
    *,
    parent: str | None = None,
    store: bool = False,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
) -> FanoutResult:
    """The failure rate by signature over ``samples`` futures from ``at`` (see the module docstring)."""
    _check_samples(samples)
    fork = _fork(session, at, parent)
    if store:
        return _stored_fanout(session, fork, samples, progress, should_stop)
    counts = _run_futures(session, fork, samples, "fanout", 0, samples, progress, should_stop)
    return _result(fork.track.world.t_ns, counts, samples)


def _run_futures(
    session: Session,
    fork: _Fork,
    samples: int,
    task: str,
    done_before: int,
    total: int,
    progress: ProgressCallback | None,
    should_stop: StopCheck | None,
) -> dict[str, list[int]]:
    track = fork.track
    reader = session.reader
    events_max = events_bound(track.end.events)
    until_ns = track.end.t_ns if (reader.end(track.branch) or {}).get("stop") == "until" else None
    overrides = overrides_of(reader, track.branch, track.world.events_processed) or None
    counts: dict[str, list[int]] = {}
    for number, key in enumerate(branch_keys(samples, fork.branch_key), start=1):
        world = restore(fork.snapshot, verify=False)
        world.branch_key = key
        simulation = track.simulation(
            world, overrides=overrides, chain=False, determinism=session.determinism
        )
        result = run_bounded(
            simulation.run, world, until_ns=until_ns, events_max=events_max, should_stop=should_stop
        )
        if result is None:
            break
        outcome = outcome_of(result, events_max)
        label = result.failure["signature"] if result.failure else outcome
        counts.setdefault(label, []).append(key)
        if progress is not None:
            progress(WorkProgress(task, done_before + number, total, f"key {key}: {label}"))
        if should_stop is not None and should_stop():
            break
    if not counts:
        raise WorkStopped(f"{task} was stopped before a future ended")
    return counts


def _stored_fanout(
    session: Session,
    fork: _Fork,
    samples: int,
    progress: ProgressCallback | None,
    should_stop: StopCheck | None,
) -> FanoutResult:
    counts: dict[str, list[int]] = {}
    at = f"#{fork.track.world.events_processed}"
    for number, key in enumerate(branch_keys(samples, fork.branch_key), start=1):
        result = branch(session, at, BranchChanges(branch_key=key), parent=fork.track.branch)
        label = result.failure["signature"] if result.failure else result.outcome
        counts.setdefault(label, []).append(key)
        if progress is not None:
            progress(WorkProgress("fanout", number, samples, f"{result.name} (key {key}): {label}"))
        if should_stop is not None and should_stop():
            break
    return _result(fork.track.world.t_ns, counts, samples)


def _result(at_ns: int, keys: dict[str, list[int]], requested: int = 0) -> FanoutResult:
    samples = sum(len(found) for found in keys.values())
    failures = sum(len(found) for label, found in keys.items() if label not in (PASS, OUTCOME_UNFINISHED))
    ordered = sorted(keys, key=lambda label: (-len(keys[label]), label))
    return FanoutResult(
        at_ns=at_ns,
        samples=samples,
        failure_rate=failures / samples,
        by_signature={label: len(keys[label]) for label in ordered},
        keys={label: tuple(keys[label]) for label in ordered},
        samples_requested=requested,
    )


def likelihood_points(
    session: Session,
    branch_name: str,
    points_max: int,
    start_ns: int | None = None,
    end_ns: int | None = None,
) -> list[int]:
    """Event numbers of the snapshots to fan out from: before the end (and the failure), within
    ``[start_ns, end_ns]`` when given, thinned to ``points_max``."""
    with track_on(session, branch_name) as track:
        last = track.end.events
        snapshots = track.snapshots()
    counts = sorted(
        {
            info.events
            for info in snapshots
            if info.events < last
            and (start_ns is None or info.t_ns >= start_ns)
            and (end_ns is None or info.t_ns <= end_ns)
        }
    )
    if len(counts) <= points_max:
        return counts
    stride = (len(counts) - 1) / (points_max - 1)
    return sorted({counts[round(index * stride)] for index in range(points_max)})


def likelihood(
    session: Session,
    samples: int = LIKELIHOOD_SAMPLES_DEFAULT,
    *,
    parent: str | None = None,
    points_max: int = LIKELIHOOD_POINTS_MAX,
    start: int | str | None = None,
    end: int | str | None = None,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
) -> LikelihoodResult:
    """The fan-out failure rate at every snapshot of a branch (see the module docstring);
    ``start``/``end`` (times, in ns or text) keep only the snapshots between them."""
    _check_samples(samples)
    if points_max < 2:
        raise ExploreError("likelihood needs at least 2 points")
    name = parent or session.branch
    window = [None if value is None else _time_ns(value, session.display_unit) for value in (start, end)]
    counts = likelihood_points(session, name, points_max, window[0], window[1])
    if not counts:
        raise ExploreError(f"no snapshot of {name} before its end in that window")
    points: list[FanoutResult] = []
    total = len(counts) * samples
    for index, events in enumerate(counts):
        if should_stop is not None and should_stop() and points:
            break
        fork = _fork(session, f"#{events}", name)
        try:
            found = _run_futures(
                session, fork, samples, "likelihood", index * samples, total, progress, should_stop
            )
        except WorkStopped:
            if not points:
                raise
            break
        points.append(_result(fork.track.world.t_ns, found))
    return LikelihoodResult(name, samples, tuple(points), point_of_no_return(points))


def point_of_no_return(points: list[FanoutResult]) -> int | None:
    """The earliest point from which every later point's futures all fail (None if the last passes)."""
    found = None
    for point in reversed(points):
        if point.failure_rate < 1.0:
            break
        found = point.at_ns
    return found


def _time_ns(value: int | str, display_unit: str) -> int:
    return value if isinstance(value, int) else parse_time(value, display_unit)
