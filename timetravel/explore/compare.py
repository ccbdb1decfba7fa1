"""Compare two branches: outcomes, metric curves side by side, first divergence, and a state diff.

``compare(session, a, b)`` reads each branch's outcome from its END frame, its metric series from
its last snapshot (no re-execution), sums each metric over nodes per time into one curve per
branch, runs the first-divergence search (:mod:`.divergence`) and diffs the two worlds at that
moment exactly as ``diff A B`` does (one function, so the two commands never disagree on the
moment or the paths; both say which moment it is).

``diff(session, a, b, at=T, path=P)`` seeks both branches to one moment and diffs their worlds
structurally (:mod:`.diff`: dicts by key, lists by index, arrays summarized). Without ``at`` the
moment is their first divergence — each side right after its diverging event — or, when they
never diverge, their ends. Pending events are compared without ``seq``. ``path`` (wildcards
allowed) narrows the diff to what it selects on either side.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from timetravel.explore.compare_results import (
    CompareResult,
    DiffCommandResult,
    DiffEntry,
    Divergence,
    MetricRow,
    RunSide,
)
from timetravel.explore.diff import CHANGES_MAX_DEFAULT
from timetravel.explore.diff import diff as structural_diff
from timetravel.explore.divergence import comparable_tree, first_divergence
from timetravel.explore.elided_values import reads_values
from timetravel.explore.paths import parse_path, select
from timetravel.explore.recorded_failure import recorded_failure
from timetravel.explore.session import Session
from timetravel.explore.tracks import check_branch, track_on
from timetravel.explore.work import ProgressCallback, StopCheck

CURVE_POINTS_MAX = 10_000
"""Points kept per metric curve (evenly spaced, first and last always kept)."""
METRICS_MAX = 64
FIRST_METRIC = "loss"
"""The metric a compare lists first (and never leaves out): what an engineer looks at first."""
OUTCOME_UNKNOWN = "unknown"
OUTCOME_IN_PROGRESS = "in progress"
MOMENT_DIVERGENCE = "first divergence"
MOMENT_AT = "--at"
MOMENT_END = "end (no divergence)"


def run_side(session: Session, name: str) -> RunSide:
    """A branch's name, outcome and failure, from its END frame (``unknown`` without one), the failure
    with every field its detector recorded (explore/recorded_failure.py)."""
    end = session.reader.end(check_branch(session.reader, name)) or {}
    failure = end.get("failure")
    if isinstance(failure, dict):
        with track_on(session, name) as track:
            failure = recorded_failure(track, failure)  # every field the detector recorded
    return RunSide(
        name=name,
        outcome=OUTCOME_IN_PROGRESS
        if session.reader.branch_in_progress(name)
        else str(end.get("outcome") or OUTCOME_UNKNOWN),
        failure=dict(failure) if isinstance(failure, dict) else None,
        t_end_ns=int(end.get("t_end_ns", 0) or 0),
    )


def metric_curve(points: list[list[Any]]) -> list[list[Any]]:
    """``[[t_ns, value], ...]``: a series' numeric values summed over nodes at each time, thinned."""
    sums: dict[int, float] = {}
    for entry in points:
        if len(entry) == 3 and isinstance(entry[2], (int, float)) and not isinstance(entry[2], bool):
            sums[int(entry[0])] = sums.get(int(entry[0]), 0.0) + float(entry[2])
    curve = [[t_ns, value] for t_ns, value in sorted(sums.items())]
    if len(curve) <= CURVE_POINTS_MAX:
        return curve
    stride = (len(curve) - 1) / (CURVE_POINTS_MAX - 1)
    return [curve[round(index * stride)] for index in range(CURVE_POINTS_MAX)]


def metric_curves(session: Session, a: str, b: str) -> dict[str, dict[str, list[list[Any]]]]:
    """``{metric: {"a": curve, "b": curve}}`` for the metrics either branch recorded."""
    with track_on(session, a) as track_a, track_on(session, b) as track_b:
        tracks = {"a": track_a, "b": track_b}
        names: list[str] = []
        for track in tracks.values():
            names += [name for name in track.metric_names() if name not in names]
        names.sort(key=lambda name: name != FIRST_METRIC)  # stable: the loss first, the rest as recorded
        curves: dict[str, dict[str, list[list[Any]]]] = {}
        for name in names[:METRICS_MAX]:
            curves[name] = {
                side: metric_curve(track.metric_series(name)) if name in track.metric_names() else []
                for side, track in tracks.items()
            }
        return curves


def compare(
    session: Session,
    a: str,
    b: str,
    *,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
) -> CompareResult:
    """Outcomes, metric curves and the first divergence of branches ``a`` and ``b``."""
    side_a, side_b = run_side(session, a), run_side(session, b)
    divergence = first_divergence(session, a, b, progress=progress, should_stop=should_stop)
    curves = metric_curves(session, a, b)
    state_diff = _diff_at(session, a, b, None, "", divergence, CHANGES_MAX_DEFAULT, curves)
    return CompareResult(side_a, side_b, divergence, curves, state_diff, metric_rows(curves))


def metric_rows(curves: dict[str, dict[str, list[list[Any]]]]) -> tuple[MetricRow, ...]:
    """compare's metric table: points, last value on each side, and when the curves first differ."""
    rows = []
    for name, sides in curves.items():
        curve_a, curve_b = sides.get("a", []), sides.get("b", [])
        rows.append(
            MetricRow(
                name,
                len(curve_a),
                len(curve_b),
                curve_a[-1][1] if curve_a else None,
                curve_b[-1][1] if curve_b else None,
                _first_difference(curve_a, curve_b),
            )
        )
    return tuple(rows)


def _first_difference(curve_a: list[list[Any]], curve_b: list[list[Any]]) -> int | None:
    for point_a, point_b in zip(curve_a, curve_b, strict=False):
        if point_a != point_b:
            return int(min(point_a[0], point_b[0]))
    if len(curve_a) != len(curve_b):
        shorter = min(len(curve_a), len(curve_b))
        longer = curve_a if len(curve_a) > len(curve_b) else curve_b
        return int(longer[shorter][0])
    return None


@reads_values
def diff(
    session: Session,
    a: str,
    b: str,
    *,
    at: int | str | None = None,
    path: str = "",
    with_divergence: bool = False,
    changes_max: int = CHANGES_MAX_DEFAULT,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
    ops: bool = False,
) -> DiffCommandResult:
    """The state diff of branches ``a`` and ``b`` at one moment (see the module docstring).

    ``with_divergence`` also runs the divergence search when ``at`` is given (it always runs
    without ``at``, to find the moment); the result carries it, or None when it did not run.
    ``ops`` (a torch run): also the first torch ops whose outputs differ, from both branches'
    re-executed step (:mod:`.op_diff`).
    """
    parse_path(path)
    check_branch(session.reader, a)
    check_branch(session.reader, b)
    divergence: Divergence | None = None
    if at is None or with_divergence or ops:
        divergence = first_divergence(session, a, b, progress=progress, should_stop=should_stop)
    result = _diff_at(session, a, b, at, path, divergence, changes_max, metric_curves(session, a, b))
    if not ops:
        return result
    from timetravel.explore.op_diff import first_differing_ops

    return dataclasses.replace(result, ops=first_differing_ops(session, a, b, divergence, progress))


def _diff_at(
    session: Session,
    a: str,
    b: str,
    at: int | str | None,
    path: str,
    divergence: Divergence | None,
    changes_max: int,
    curves: dict[str, dict[str, list[list[Any]]]],
) -> DiffCommandResult:
    """The diff at ``at``, else at ``divergence``, else at the ends (what compare and diff share)."""
    with track_on(session, a) as track_a, track_on(session, b) as track_b:
        at_ns, moment = _align(track_a, track_b, at, divergence)
        changes, omitted = diff_worlds(track_a, track_b, path, changes_max)
    return DiffCommandResult(a, b, at_ns, changes, omitted, divergence, curves, moment)


def _align(
    track_a: Session, track_b: Session, at: int | str | None, divergence: Divergence | None
) -> tuple[int, str]:
    """Both tracks at ``at``, else right after the divergence, else at their ends: the time
    compared and which of the three moments it is."""
    if at is not None:
        track_a.goto(at)
        track_b.goto(at)
        at_ns, moment = max(track_a.world.t_ns, track_b.world.t_ns), MOMENT_AT
    elif divergence is not None:
        _goto_divergence(track_a, divergence.event_a, divergence.t_ns)
        _goto_divergence(track_b, divergence.event_b, divergence.t_ns)
        # the worlds right after the diverging event: its own time (a torch divergence's t_ns is the
        # collective's later completion, event_t_ns the event's)
        at_ns = divergence.event_t_ns if divergence.event_t_ns is not None else divergence.t_ns
        moment = MOMENT_DIVERGENCE
    else:
        track_a.goto("end")
        track_b.goto("end")
        at_ns, moment = max(track_a.world.t_ns, track_b.world.t_ns), MOMENT_END
    return at_ns, moment


def _goto_divergence(track: Session, event: int | None, t_ns: int) -> None:
    """Right after the diverging event on this side (or, when this side has no such event, the
    state just before that time)."""
    if event is not None:
        track.goto_event(event)
    else:
        track.goto_time(t_ns - 1)


def diff_worlds(
    track_a: Session, track_b: Session, path: str, changes_max: int
) -> tuple[tuple[DiffEntry, ...], int]:
    """The changes between the two tracks' worlds under ``path`` and how many more were found."""
    tree_a, tree_b = comparable_tree(track_a.world), comparable_tree(track_b.world)
    parsed = parse_path(path)
    if not parsed.segments:
        result = structural_diff(tree_a, tree_b, changes_max=changes_max)
        return _entries(result.changes), result.omitted
    matches_a, matches_b = dict(select(tree_a, parsed)), dict(select(tree_b, parsed))
    entries: list[DiffEntry] = []
    omitted = 0
    for concrete in [*matches_a, *(p for p in matches_b if p not in matches_a)]:
        if concrete not in matches_b or concrete not in matches_a:
            change = "removed" if concrete in matches_a else "added"
            entries.append(DiffEntry(concrete, change, f"only in {'a' if concrete in matches_a else 'b'}"))
            continue
        result = structural_diff(matches_a[concrete], matches_b[concrete], concrete, changes_max=changes_max)
        entries += _entries(result.changes)
        omitted += result.omitted
    kept = entries[:changes_max]
    return tuple(kept), omitted + len(entries) - len(kept)


def _entries(changes: Any) -> tuple[DiffEntry, ...]:
    return tuple(DiffEntry(change.path, change.change, change.summary) for change in changes)
