"""Watchpoints: the last or the next change of a path, from the cursor.

**last_change(path) / next_change(path)** are reverse and forward watchpoints, as rr users know
them: from the cursor, the latest event at or before it (or the first after it) that changed the
value under ``path`` (wildcards allowed: the witnesses name which match changed). Values compare by
their digests (bitwise, arrays by pages). Going backwards works window by window between snapshots,
latest first: re-execute a window, note every change, and the last one is the answer; a window
without an event for the watched node is skipped without re-executing it. A value that changed and
changed back (A, B, A) is still found, because every relevant event in the window is compared.

Both are searches (:mod:`timetravel.explore.search`): bounded by ``events_max`` re-executed events,
reporting progress and stopping when ``should_stop`` says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from timetravel.explore.elided_values import reads_values
from timetravel.explore.paths import Path, parse_path, select
from timetravel.explore.results import FindResult
from timetravel.explore.search import (
    SEARCH_EVENTS_MAX,
    STRATEGY_LAST_CHANGE,
    STRATEGY_NEXT_CHANGE,
    Hit,
    Search,
    Stopped,
    events_to_next_relevant,
    find_result,
    partial_tree,
    parts_read,
)
from timetravel.explore.stepper import Stepper, position_at_or_before, recorded_events
from timetravel.explore.work import ProgressCallback
from timetravel.sim.encoding import digest
from timetravel.sim.event import Event

if TYPE_CHECKING:
    from timetravel.explore.session import Session
    from timetravel.sim.world import World


class _Watch:
    """The digests of the values under one path, grouped by node when the path is in node state."""

    def __init__(self, path: Path) -> None:
        self.path = path
        segments = path.segments
        self.node_scoped = len(segments) >= 2 and segments[0] == "nodes"
        self.node = segments[1] if self.node_scoped and segments[1] != "*" else None
        self.parts = parts_read([path])

    def relevant(self, event: Event | None) -> bool:
        if event is None or not self.node_scoped:
            return True
        return self.node is None or event.dst == self.node

    def digests(self, world: World) -> dict[str, bytes]:
        return {
            concrete: digest(value) for concrete, value in select(partial_tree(world, self.parts), self.path)
        }

    def node_digests(self, world: World, node: str) -> dict[str, bytes]:
        """The digests of the matches inside ``node``'s state (node-scoped paths only)."""
        state = world.nodes.get(node)
        if state is None:
            return {}
        segments = ("nodes", node, *self.path.segments[2:])
        return {
            concrete: digest(value) for concrete, value in select({"nodes": {node: state}}, Path(segments))
        }

    def compare(self, world: World, event: Event | None, known: dict[str, bytes]) -> tuple[str, ...]:
        """Update ``known`` after ``event``; return the concrete paths whose value changed."""
        if event is not None and self.node_scoped:
            now = self.node_digests(world, event.dst)
            prefix = f"nodes/{event.dst}"
            before = {
                path: value
                for path, value in known.items()
                if path == prefix or path.startswith(prefix + "/")
            }
        else:
            now = self.digests(world)
            before = dict(known)
        changed = tuple(sorted(path for path in set(now) | set(before) if now.get(path) != before.get(path)))
        for path in before:
            known.pop(path, None)
        known.update(now)
        return changed


@reads_values
def next_change(
    session: Session,
    path: str,
    *,
    start_events: int | None = None,
    events_max: int = SEARCH_EVENTS_MAX,
    progress: ProgressCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> FindResult:
    """The first event after #``start_events`` (default: the cursor) that changes the value at ``path``."""
    return _watchpoint(session, path, start_events, events_max, progress, should_stop, forward=True)


@reads_values
def last_change(
    session: Session,
    path: str,
    *,
    start_events: int | None = None,
    events_max: int = SEARCH_EVENTS_MAX,
    progress: ProgressCallback | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> FindResult:
    """The latest event at or before #``start_events`` (default: the cursor) that changed the value
    at ``path``: a reverse watchpoint. At the recorded end the end-of-run checks count as a change."""
    return _watchpoint(session, path, start_events, events_max, progress, should_stop, forward=False)


def _watchpoint(
    session: Session,
    path: str,
    start_events: int | None,
    events_max: int,
    progress: ProgressCallback | None,
    should_stop: Callable[[], bool] | None,
    *,
    forward: bool,
) -> FindResult:
    watch = _Watch(parse_path(path))
    start = session.position.events if start_events is None else start_events
    start = min(max(start, 0), session.end.events)
    total = session.end.events - start if forward else start
    search = Search(session, events_max, progress, should_stop, total)
    search.phase = "events"
    hit: Hit | None = None
    stopped_by = None
    try:
        hit = _next_change(search, watch, start) if forward else _last_change(search, watch, start)
    except Stopped as stop:
        stopped_by = stop.reason
    strategy = STRATEGY_NEXT_CHANGE if forward else STRATEGY_LAST_CHANGE
    return find_result(session, str(watch.path), hit, search, strategy, stopped_by)


def _next_change(search: Search, watch: _Watch, start: int) -> Hit | None:
    session = search.session
    if start >= session.end.events:
        return None
    stepper = search.stepper_at(start)
    known = watch.digests(stepper.world)
    nodes = frozenset([watch.node]) if watch.node is not None else None
    while not stepper.at_end():
        before = stepper.events
        stepper = search.walk(stepper, events_to_next_relevant(session, nodes, before))
        if stepper.events == before:
            break
        event = stepper.last_event()
        if not watch.relevant(event):
            continue
        changed = watch.compare(stepper.world, event, known)
        if changed:
            return Hit(stepper.events, stepper.world.t_ns, changed)
    if stepper.at_end():
        world = search.final_world(stepper)
        changed = watch.compare(world, None, known)
        if changed:
            return Hit(world.events_processed, world.t_ns, changed, at_end=True)
    return None


def _last_change(search: Search, watch: _Watch, start: int) -> Hit | None:
    session = search.session
    snapshots = session.snapshots()
    window_end = start
    include_end = start >= session.end.events
    while window_end > 0:
        position = position_at_or_before(session, window_end - 1)
        window_start = snapshots[position].events
        if include_end or _window_touches(session, watch, window_start, window_end):
            hit = _last_change_in(search, watch, position, window_end, include_end)
            if hit is not None:
                return hit
        include_end = False
        window_end = window_start
    return None


def _window_touches(session: Session, watch: _Watch, start: int, end: int) -> bool:
    """Whether any event in (start, end] can change the watched value (read from the recording)."""
    if watch.node is None:
        return True
    return any(event.dst == watch.node for _, event in recorded_events(session, start + 1, end))


def _last_change_in(
    search: Search, watch: _Watch, position: int, window_end: int, include_end: bool
) -> Hit | None:
    """Re-execute the window from snapshot ``position`` to #``window_end``; the last change in it."""
    session = search.session
    stepper = Stepper(session, position)
    search.check()
    known = watch.digests(stepper.world)
    nodes = frozenset([watch.node]) if watch.node is not None else None
    last: Hit | None = None
    while stepper.events < window_end:
        before = stepper.events
        step = min(events_to_next_relevant(session, nodes, before), window_end - before)
        stepper = search.walk(stepper, step)
        if stepper.events == before:
            break
        event = stepper.last_event()
        if watch.relevant(event) and (changed := watch.compare(stepper.world, event, known)):
            last = Hit(stepper.events, stepper.world.t_ns, changed)
    if include_end and stepper.at_end():
        world = search.final_world(stepper)
        changed = watch.compare(world, None, known)
        if changed:
            return Hit(world.events_processed, world.t_ns, changed, at_end=True)
    return last
