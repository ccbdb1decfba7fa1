"""The commands that need only the open Session: move, look, watch, list faults and branches.

``goto``, ``step``, ``back`` and ``where`` return a :class:`CursorResult` that carries every
watch's value at the new cursor, flagged ``changed`` when its bits differ from the last time it
was shown — so a front end that renders the cursor shows the watches too, and a watch is "a
path's value each time the cursor moves". ``watch PATH`` adds one (at most WATCHES_MAX),
``watch`` lists them, ``watch --clear [PATH]`` removes them, and ``watch PATH --previous`` /
``--next`` move the cursor to the last / next event that changed the path (a reverse
watchpoint, bounded by :data:`timetravel.explore.navigate.WATCH_SCAN_EVENTS_MAX`).

``faults`` shows the schedule in the world at the cursor (hits so far); ``faults --branch B``
shows branch B's schedule as it ran (its end state, total hits), without moving the cursor.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from timetravel.explore.branch_tree import branch_tree
from timetravel.explore.commands.parse import CommandError, Invocation, Moment
from timetravel.explore.commands.run import CommandContext, register_handler
from timetravel.explore.navigate import (
    EVENT_ROWS_DEFAULT,
    EVENT_ROWS_MAX,
    NoCollectives,
    back_collectives,
    completed_collective,
    cursor_result,
    event_rows,
    next_change,
    previous_change,
    step_collectives,
)
from timetravel.explore.results import (
    BranchesResult,
    CursorResult,
    EventsResult,
    FaultsResult,
    PrintResult,
    WatchResult,
    WatchValue,
)
from timetravel.explore.session import Session
from timetravel.explore.view import (
    PRINT_DEPTH_DEFAULT,
    fault_schedule,
    print_entries,
    watch_digest,
    watch_text,
)

WATCHES_MAX = 16
PRINT_DEPTH_MAX = 16


def watch_values(context: CommandContext) -> tuple[WatchValue, ...]:
    """Every watch at the cursor; remembers the digests so the next move can say what changed."""
    session: Session = context.require_session("watch")
    values = []
    for path in context.watches:
        now = watch_digest(session.world, path)
        before = context.watch_digests.get(path)
        values.append(WatchValue(path, watch_text(session.world, path), before is not None and before != now))
        context.watch_digests[path] = now
    return tuple(values)


def _cursor(context: CommandContext) -> CursorResult:
    return cursor_result(context.require_session("where"), watch_values(context))


def _move_to(session: Session, moment: Moment) -> None:
    if moment.event is not None:
        session.goto_event(moment.event)
    else:
        assert moment.t_ns is not None
        session.goto_time(moment.t_ns)


def _goto(invocation: Invocation, context: CommandContext) -> CursorResult:
    session: Session = context.require_session("goto")
    branch = invocation.value("branch")
    if branch is not None:
        session = context.switch_branch(branch, "goto")
    _move_to(session, invocation.value("time"))
    return _cursor(context)


def _step_or_back(invocation: Invocation, context: CommandContext) -> CursorResult:
    """``step [N]`` / ``back [N]``: by events, or with ``--collective`` by collectives."""
    forward = invocation.name == "step"
    session = context.require_session(invocation.name)
    if invocation.value("collective"):
        return _by_collectives(invocation, context, session, forward=forward)
    move = session.step if forward else session.back
    move(invocation.value("count", 1))
    return _cursor(context)


def _by_collectives(
    invocation: Invocation, context: CommandContext, session: Session, *, forward: bool
) -> CursorResult:
    """``step --collective [N]`` / ``back --collective [N]`` (explore/navigate.py: any rank's)."""
    count = invocation.value("count", 1)
    name = invocation.name
    try:
        _position, moved = step_collectives(session, count) if forward else back_collectives(session, count)
    except NoCollectives as error:
        raise CommandError(f"{name} --collective: {error}") from None
    note = None
    if moved == 0 < count:
        note = f"no collective completes {'after' if forward else 'before'} the cursor: it stays"
    elif moved < count:
        note = f"only {moved} collective(s) complete {'after' if forward else 'before'} the cursor"
    result = _cursor(context)
    return dataclasses.replace(result, collective=completed_collective(session), note=note)


def _where(invocation: Invocation, context: CommandContext) -> CursorResult:
    return _cursor(context)


def _events(invocation: Invocation, context: CommandContext) -> EventsResult:
    session: Session = context.require_session("events")
    count = invocation.value("count", EVENT_ROWS_DEFAULT)
    if count > EVENT_ROWS_MAX:
        raise CommandError(f"events: --count is at most {EVENT_ROWS_MAX}")
    return event_rows(
        session,
        node=invocation.value("node"),
        kind=invocation.value("kind"),
        count=count,
        after=bool(invocation.value("after", False)),
    )


def _print(invocation: Invocation, context: CommandContext) -> PrintResult:
    session: Session = context.require_session("print")
    path = invocation.value("path") or ""
    depth = invocation.value("depth", PRINT_DEPTH_DEFAULT)
    if not 1 <= depth <= PRINT_DEPTH_MAX:
        raise CommandError(f"print: --depth is between 1 and {PRINT_DEPTH_MAX}")
    entries, omitted = print_entries(session.world, path, depth)
    return PrintResult(session.branch, session.position.t_ns, path, entries, omitted)


def _watch(invocation: Invocation, context: CommandContext) -> WatchResult:
    session: Session = context.require_session("watch")
    path: str | None = invocation.value("path")
    previous, following = bool(invocation.value("previous")), bool(invocation.value("next"))
    if invocation.value("clear"):
        if previous or following:
            raise CommandError("watch: --clear cannot be combined with --previous or --next")
        return _clear(context, path)
    if previous and following:
        raise CommandError("watch: give --previous or --next, not both")
    if path is None:
        if previous or following:
            raise CommandError("watch: --previous and --next need a PATH")
        return WatchResult(watch_values(context))
    if path not in context.watches:
        if len(context.watches) >= WATCHES_MAX:
            raise CommandError(f"watch: at most {WATCHES_MAX} watches (remove one with watch --clear PATH)")
        context.watches.append(path)
    if not (previous or following):
        return WatchResult(watch_values(context), message=f"watching {path}")
    moved = previous_change(session, path) if previous else next_change(session, path)
    direction = "before" if previous else "after"
    if moved is None:
        return WatchResult(
            watch_values(context), found=False, message=f"{path} does not change {direction} the cursor"
        )
    return WatchResult(
        watch_values(context),
        moved=cursor_result(session),
        message=f"{path} changes at event #{moved.events}",
    )


def _clear(context: CommandContext, path: str | None) -> WatchResult:
    if path is None:
        context.watches.clear()
        context.watch_digests.clear()
        return WatchResult((), message="no watches")
    if path not in context.watches:
        raise CommandError(f"watch: {path} is not watched (watches: {', '.join(context.watches) or 'none'})")
    context.watches.remove(path)
    context.watch_digests.pop(path, None)
    return WatchResult(watch_values(context), message=f"stopped watching {path}")


def _faults(invocation: Invocation, context: CommandContext) -> FaultsResult:
    session: Session = context.require_session("faults")
    branch = invocation.value("branch")
    if branch is None or branch == session.branch:
        return FaultsResult(session.branch, fault_schedule(session.world))
    return branch_faults(context, branch)


def branch_faults(context: CommandContext, branch: str) -> FaultsResult:
    """A branch's schedule at its end, read without moving the cursor."""
    session: Session = context.require_session("faults")
    names = [row.name for row in branch_tree(session.reader)]
    if branch not in names:
        raise CommandError(f"faults: no branch {branch!r} (branches: {', '.join(names)})")
    with Session.open(
        session.reader.path, scenario=session.scenario, branch=branch, launch=session.launch
    ) as other:
        other.goto("end")
        return FaultsResult(branch, fault_schedule(other.world))


def _branches(invocation: Invocation, context: CommandContext) -> BranchesResult:
    session: Session = context.require_session("branches")
    return BranchesResult(branch_tree(session.reader), current=session.branch)


HANDLERS: dict[str, Any] = {
    "goto": _goto,
    "step": _step_or_back,
    "back": _step_or_back,
    "where": _where,
    "events": _events,
    "print": _print,
    "watch": _watch,
    "faults": _faults,
    "branches": _branches,
}

for _name, _handler in HANDLERS.items():
    register_handler(_name, _handler)
