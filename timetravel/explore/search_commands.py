"""The command language's search commands: ``find-first`` and ``watch`` (with its reverse watchpoint).

``find-first PREDICATE [--branch B] [--from T] [--scan] [--go]`` runs :func:`find_first` and
returns its :class:`FindResult`; with ``--go`` the cursor moves there.

``watch`` keeps the context's watch list (the paths a front end shows next to the cursor) and,
with ``--previous`` or ``--next``, moves the cursor to the last or next event that changed a
watched path (rr's reverse-continue onto a watchpoint): ``watch nodes/r3/weights --previous``. With
no path it searches every watched path and goes to the nearest change among them. Standing right
after a change, ``--previous`` goes to the change before it, so repeating it walks back through
the history of the value.

Long searches report :class:`SearchProgress` through the context and stop when it asks them to.
"""

from __future__ import annotations

import json
from typing import Any

from timetravel.explore.commands.parse import CommandError, Invocation, Moment
from timetravel.explore.commands.run import CommandContext, register_handler
from timetravel.explore.inspect_view import summarize
from timetravel.explore.paths import PathError, parse_path, select
from timetravel.explore.results import CursorResult, FindResult, WatchResult, WatchValue
from timetravel.explore.search import (
    STRATEGY_AUTO,
    STRATEGY_SCAN,
    find_first,
    last_change,
    next_change,
    tree_for,
)
from timetravel.explore.stepper import event_number_at_time
from timetravel.recording.catalog import MAIN_BRANCH

WATCHES_MAX = 32
"""Paths one context may watch."""
WATCH_VALUE_CHARS_MAX = 80
WATCH_MATCHES_SHOWN = 4


def moment_events(session: Any, moment: Moment | None) -> int:
    """The event number a ``time`` argument names on the session's branch (0 when None)."""
    if moment is None:
        return 0
    if moment.event is not None:
        return min(moment.event, session.end.events)
    assert moment.t_ns is not None
    return event_number_at_time(session, moment.t_ns)


def branch_session(context: CommandContext, command: str, branch: str | None) -> Any:
    """The session of ``branch`` (the cursor's own when None): the same recording, another branch."""
    session = context.require_session(command)
    if branch is None or branch == session.branch:
        return session
    if branch != MAIN_BRANCH and branch not in session.reader.catalog.branches:
        known = ", ".join([MAIN_BRANCH, *session.reader.catalog.branches])
        raise CommandError(f"{command}: no branch {branch!r} in this recording (branches: {known})")
    return type(session).open(session.reader.path, scenario=session.scenario, branch=branch)


def _find_first(invocation: Invocation, context: CommandContext) -> FindResult:
    cursor_session = context.require_session("find-first")
    session = branch_session(context, "find-first", invocation.value("branch"))
    try:
        result = find_first(
            session,
            invocation.value("predicate"),
            start_events=moment_events(session, invocation.value("from")),
            strategy=STRATEGY_SCAN if invocation.value("scan") else STRATEGY_AUTO,
            progress=context.progress,
            should_stop=context.should_stop,
        )
        if invocation.value("go") and result.found and result.event is not None:
            _go(session, result)
            if session is not cursor_session:
                context.session = session  # the cursor moves to the branch it found the moment on
                cursor_session.close()
    finally:
        if session is not context.session:
            session.close()
    return result


def _go(session: Any, result: FindResult) -> None:
    assert result.event is not None
    if result.kind == "end":
        session.goto("end")
    else:
        session.goto_event(result.event)


# -- watch --------------------------------------------------------------------------------------


def value_text(world: Any, path: str) -> str:
    """A short one-line summary of the value(s) under ``path`` in ``world``."""
    try:
        parsed = parse_path(path)
        matches = select(tree_for(world, [parsed]), parsed)
    except PathError as error:
        return f"<{error}>"
    if not matches:
        return "<nothing here>"
    if len(matches) == 1 and not parsed.has_wildcard:
        text = _compact(matches[0][1])
    else:
        shown = [f"{concrete}={_compact(value)}" for concrete, value in matches[:WATCH_MATCHES_SHOWN]]
        more = f" (+{len(matches) - WATCH_MATCHES_SHOWN} more)" if len(matches) > WATCH_MATCHES_SHOWN else ""
        text = ", ".join(shown) + more
    return text if len(text) <= WATCH_VALUE_CHARS_MAX else text[: WATCH_VALUE_CHARS_MAX - 3] + "..."


def _compact(value: Any) -> str:
    return json.dumps(summarize(value, 1), separators=(",", ":"), default=str)


def watch_values(session: Any, watches: list[str], changed: tuple[str, ...] = ()) -> tuple[WatchValue, ...]:
    return tuple(
        WatchValue(expression, value_text(session.world, expression), expression in changed)
        for expression in watches
    )


def cursor_result(session: Any, watches: list[str], changed: tuple[str, ...] = ()) -> CursorResult:
    position = session.position
    following = session.event(position.events + 1)
    next_event = (
        None
        if following is None
        else {
            "number": following.number,
            "t_ns": following.t_ns,
            "dst": following.node,
            "kind": following.kind,
        }
    )
    return CursorResult(
        branch=position.branch,
        t_ns=position.t_ns,
        event=position.events,
        events_total=session.end.events,
        t_end_ns=session.end.t_ns,
        failure=session.info.failure,
        next_event=next_event,
        watches=watch_values(session, watches, changed),
    )


def _watch(invocation: Invocation, context: CommandContext) -> WatchResult:
    session = context.require_session("watch")
    path = invocation.value("path")
    previous, following, clear = (invocation.value(name) for name in ("previous", "next", "clear"))
    if previous and following:
        raise CommandError("watch: --previous and --next go opposite ways; give one")
    if clear:
        if previous or following:
            raise CommandError("watch: --clear does not move the cursor; give it alone")
        removed = [w for w in context.watches if path is None or w == path]
        if path is not None and not removed:
            raise CommandError(
                f"watch: {path} is not watched (watched: {', '.join(context.watches) or 'none'})"
            )
        context.watches[:] = [w for w in context.watches if w not in removed]
        return WatchResult(
            watch_values(session, context.watches), message=f"cleared {len(removed)} watch(es)"
        )
    if path is not None and path not in context.watches:
        if len(context.watches) >= WATCHES_MAX:
            raise CommandError(f"watch: at most {WATCHES_MAX} paths can be watched; clear some first")
        context.watches.append(path)
    if not (previous or following):
        return WatchResult(watch_values(session, context.watches))
    targets = [path] if path is not None else list(context.watches)
    if not targets:
        raise CommandError("watch: nothing is watched; give a path (watch nodes/r3/step --previous)")
    found = [_search_change(session, target, backwards=bool(previous), context=context) for target in targets]
    hits = [result for result in found if result.found and result.event is not None]
    direction = "previous" if previous else "next"
    if not hits:
        stopped = next((result.stopped_by for result in found if result.stopped_by), None)
        reason = f" (stopped: {stopped})" if stopped else ""
        where = "before" if previous else "after"
        message = f"no change of {', '.join(targets)} {where} the cursor{reason}"
        return WatchResult(watch_values(session, context.watches), None, False, message)
    best = max(hits, key=_order) if previous else min(hits, key=_order)
    _go(session, best)
    changed = tuple(result.expression for result in hits if _order(result) == _order(best))
    moved = cursor_result(session, context.watches, changed)
    what = f"{best.kind} -> {best.node}" if best.kind != "end" else "the end-of-run checks"
    message = f"{direction} change of {', '.join(changed)}: event #{best.event} ({what}); changed {', '.join(best.witnesses)}"
    return WatchResult(watch_values(session, context.watches, changed), moved, True, message)


def _order(result: FindResult) -> tuple[int, int]:
    return (result.event or 0, 1 if result.kind == "end" else 0)


def _search_change(session: Any, path: str, *, backwards: bool, context: CommandContext) -> FindResult:
    progress, should_stop = context.progress, context.should_stop
    if not backwards:
        return next_change(session, path, progress=progress, should_stop=should_stop)
    cursor = session.position.events
    result = last_change(session, path, start_events=cursor, progress=progress, should_stop=should_stop)
    if result.found and result.event == cursor and cursor > 0:
        # standing right after this change already: the previous one is before it
        result = last_change(
            session, path, start_events=cursor - 1, progress=progress, should_stop=should_stop
        )
    return result


def register() -> None:
    register_handler("find-first", _find_first)
    register_handler("watch", _watch)


register()
