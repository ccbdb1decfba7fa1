"""The command language's ``find-first``: the first moment a predicate holds, and where.

``find-first PREDICATE [--branch B] [--from T] [--scan] [--go]`` runs
:func:`timetravel.explore.search.find_first` on the cursor's branch (or branch ``B``, opened
alongside without moving the cursor) and returns its :class:`FindResult`. ``--go`` moves the
cursor there, switching the cursor to ``B`` first when one is named. Long searches report
:class:`~timetravel.explore.work.WorkProgress` reports through the context and stop when it asks them to.

(``watch --previous/--next``, in :mod:`timetravel.explore.commands.navigation`, finds changes with
the same engine: :func:`timetravel.explore.watchpoints.last_change` and ``next_change``.)
"""

from __future__ import annotations

from timetravel.explore.branch_tree import branch_names
from timetravel.explore.commands.parse import CommandError, Invocation, Moment
from timetravel.explore.commands.run import CommandContext, register_handler
from timetravel.explore.results import FindResult
from timetravel.explore.search import END_KIND, STRATEGY_AUTO, STRATEGY_SCAN, find_first
from timetravel.explore.session import Session
from timetravel.explore.stepper import event_number_at_time


def moment_events(session: Session, moment: Moment | None) -> int:
    """The event number a ``time`` value names on the session's branch (0 when None)."""
    if moment is None:
        return 0
    if moment.event is not None:
        return min(moment.event, session.end.events)
    assert moment.t_ns is not None
    return event_number_at_time(session, moment.t_ns)


def go_to(session: Session, result: FindResult) -> None:
    """Move the cursor to a search's answer (the final state when the end-of-run checks made it)."""
    assert result.event is not None
    if result.kind == END_KIND:
        session.goto("end")
    else:
        session.goto_event(result.event)


def _find_first(invocation: Invocation, context: CommandContext) -> FindResult:
    cursor: Session = context.require_session("find-first")
    branch = invocation.value("branch")
    if branch is not None and branch != cursor.branch:
        known = branch_names(cursor.reader)
        if branch not in known:
            raise CommandError(f"find-first: no branch {branch!r} (branches: {', '.join(known)})")
    go = bool(invocation.value("go"))
    if go and branch is not None:
        cursor = context.switch_branch(branch, "find-first")
    session = (
        cursor
        if branch in (None, cursor.branch)
        else Session.open(cursor.reader.path, scenario=cursor.scenario, branch=branch, launch=cursor.launch)
    )
    try:
        result = _search(invocation, context, session)
        if go and result.found:
            go_to(session, result)
    finally:
        if session is not cursor:
            session.close()
    return result


def _search(invocation: Invocation, context: CommandContext, session: Session) -> FindResult:
    return find_first(
        session,
        invocation.value("predicate"),
        start_events=moment_events(session, invocation.value("from")),
        strategy=STRATEGY_SCAN if invocation.value("scan") else STRATEGY_AUTO,
        progress=context.progress,
        should_stop=context.should_stop,
    )


def register() -> None:
    register_handler("find-first", _find_first)


register()
