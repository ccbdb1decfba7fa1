"""The command language's ``explain [BRANCH]`` and ``origin PATH [--at T] [--go]``.

``explain`` runs :func:`timetravel.explore.explain.explain` on the named branch (default: the
cursor's) without moving the cursor; ``origin`` runs :func:`timetravel.explore.provenance.origin`
on the cursor's branch, at ``--at`` or at the cursor, and ``--go`` moves the cursor to the event
that wrote the value. Importing this module registers the handlers.
"""

from __future__ import annotations

from typing import Any

from timetravel.explore.commands.parse import CommandError, Invocation, Moment
from timetravel.explore.commands.run import CommandContext, register_handler
from timetravel.explore.explain import explain
from timetravel.explore.provenance import origin
from timetravel.explore.replay import ReplayDivergence
from timetravel.explore.work import ExploreError


def _explain(invocation: Invocation, context: CommandContext) -> Any:
    session = context.require_session("explain")
    try:
        return explain(
            session, invocation.value("branch"), progress=context.progress, should_stop=context.should_stop
        )
    except (ExploreError, ReplayDivergence) as error:
        raise CommandError(f"explain: {error}") from None


def _moment(value: Moment | None) -> int | str | None:
    if value is None:
        return None
    return f"#{value.event}" if value.event is not None else int(value.t_ns or 0)


def _origin(invocation: Invocation, context: CommandContext) -> Any:
    session = context.require_session("origin")
    try:
        result = origin(session, invocation.value("path"), _moment(invocation.value("at")))
    except (ExploreError, ReplayDivergence, ValueError) as error:
        raise CommandError(f"origin: {error}") from None
    if invocation.value("go") and result.event is not None:
        session.goto_event(result.event)
    return result


register_handler("explain", _explain)
register_handler("origin", _origin)
