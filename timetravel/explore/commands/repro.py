"""The command language's ``minimize`` and ``export``: a minimal repro, and a trace for Perfetto.

``minimize [--out FILE.ttr] [--pytest FILE.py] [--force] [--max-runs N] [--max-seconds S] [--max-stall N]``
minimizes the failure of the cursor's branch, or of ``--branch B``
(:func:`timetravel.explore.minimize_run.minimize_run`), and returns its :class:`MinimizeResult`.
``export --perfetto FILE.json [--branch B]`` writes the branch as Chrome trace events
(:func:`timetravel.explore.perfetto.export_perfetto`) without moving the cursor. Both report
progress through the context and stop when it asks them to.
"""

from __future__ import annotations

from timetravel.explore.branch_tree import branch_names
from timetravel.explore.commands.parse import CommandError, Invocation
from timetravel.explore.commands.run import CommandContext, register_handler
from timetravel.explore.minimize_run import minimize_run
from timetravel.explore.minimize_trials import (
    MAX_RUNS_DEFAULT,
    MAX_SECONDS_DEFAULT,
    MAX_STALL_DEFAULT,
    Budget,
    MinimizeResult,
    NothingToMinimize,
)
from timetravel.explore.perfetto import export_perfetto
from timetravel.explore.results import ExportResult
from timetravel.explore.session import Session


def budget_of(invocation: Invocation) -> Budget:
    """The minimizer's budget from ``--max-runs``, ``--max-seconds`` and ``--max-stall``."""
    return Budget(
        max_runs=invocation.value("max_runs", MAX_RUNS_DEFAULT),
        max_seconds=invocation.value("max_seconds", MAX_SECONDS_DEFAULT),
        max_stall=invocation.value("max_stall", MAX_STALL_DEFAULT),
    )


def _branch_session(context: CommandContext, command: str, branch: str | None) -> Session:
    """The cursor's Session, or another branch of its recording opened alongside (close it after)."""
    cursor: Session = context.require_session(command)
    if branch is None or branch == cursor.branch:
        return cursor
    known = branch_names(cursor.reader)
    if branch not in known:
        raise CommandError(f"{command}: no branch {branch!r} (branches: {', '.join(known)})")
    return Session.open(cursor.reader.path, scenario=cursor.scenario, branch=branch, launch=cursor.launch)


def _minimize(invocation: Invocation, context: CommandContext) -> MinimizeResult:
    cursor: Session = context.require_session("minimize")
    session = _branch_session(context, "minimize", invocation.value("branch"))
    try:
        return minimize_run(
            session,
            out=invocation.value("out"),
            pytest=invocation.value("pytest"),
            budget=budget_of(invocation),
            progress=context.progress,
            should_stop=context.should_stop,
            force=bool(invocation.value("force", False)),
        )
    except NothingToMinimize as error:
        raise CommandError(f"minimize: {error}") from None
    finally:
        if session is not cursor:
            session.close()


def _export(invocation: Invocation, context: CommandContext) -> ExportResult:
    cursor: Session = context.require_session("export")
    path = invocation.value("perfetto")
    if path is None:
        raise CommandError("export: give the file to write with --perfetto FILE.json")
    session = _branch_session(context, "export", invocation.value("branch"))
    try:
        return export_perfetto(session, path, progress=context.progress, should_stop=context.should_stop)
    finally:
        if session is not cursor:
            session.close()


register_handler("minimize", _minimize)
register_handler("export", _export)
