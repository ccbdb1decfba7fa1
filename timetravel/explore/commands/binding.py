"""How a front end opens a recording and talks to it: a CommandContext and a value source.

::

    from timetravel.explore.commands import open_context, RecordingValues, run_line
    with open_context("run.ttr") as context:            # Session on main, cursor at #0
        values = RecordingValues(context)               # completion + plot data, follows the cursor
        result = run_line("goto 950", context)          # CursorResult
        values.values("node", "r")                      # ["r0", "r1", ...]

:class:`RecordingValues` reads ``context.session`` on every call, so it follows branch switches
(``goto T --branch b1`` reopens the Session on b1) and reopens (after a branch was appended).
It is the :class:`~timetravel.explore.commands.ValueSource` for :func:`complete` and the shell's
completer (with ``notes`` for the meta column), and the shell's ``plot`` ``MetricSource``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from timetravel.explore.branch_tree import branch_names, branch_tree
from timetravel.explore.commands.parse import CommandError
from timetravel.explore.commands.run import CommandContext
from timetravel.explore.navigate import branch_failure
from timetravel.explore.paths import completions, world_tree
from timetravel.explore.session import Session
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.scenarios import UnknownScenarioError
from timetravel.sim.scenario import Scenario
from timetravel.sim.timefmt import format_time

VALUES_MAX = 200
"""Candidates one ``values`` call returns."""


def open_context(
    path: str | Path,
    *,
    scenario_target: str | None = None,
    scenario: Scenario | None = None,
    branch: str = MAIN_BRANCH,
    progress: Callable[[Any], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> CommandContext:
    """Open a recording for the command language (see :meth:`Session.open` for the arguments).

    The cursor starts at event #0 of ``branch``. Close it with ``context.close()`` or ``with``.
    Raises RecordingError (a damaged file), UnknownScenarioError (no such scenario or branch).
    """
    session = Session.open(path, scenario_target=scenario_target, scenario=scenario)
    context = CommandContext(session=session, progress=progress, should_stop=should_stop)
    if branch != MAIN_BRANCH:
        try:
            context.switch_branch(branch, "open")
        except CommandError as error:
            context.close()
            raise UnknownScenarioError(f"{path}: {str(error).removeprefix('open: ')}") from None
    return context


class RecordingValues:
    """Completion candidates and metric curves from the context's open recording."""

    def __init__(self, context: CommandContext) -> None:
        self.context = context

    @property
    def session(self) -> Session | None:
        session: Session | None = self.context.session
        return session

    def values(self, kind: str, prefix: str) -> list[str]:
        """Candidates of ``kind`` that start with ``prefix`` (``[]`` with nothing open)."""
        session = self.session
        if session is None:
            return []
        if kind == "path":
            return completions(world_tree(session.world), prefix, VALUES_MAX)
        found = [value for value in self._all(session, kind) if value.startswith(prefix)]
        return found[:VALUES_MAX]

    def notes(self, kind: str) -> dict[str, str]:
        """A word about each value of ``kind``: a branch's outcome, a node's role, a time's origin."""
        session = self.session
        if session is None:
            return {}
        if kind == "branch":
            return {row.name: row.outcome for row in branch_tree(session.reader)}
        if kind == "node":
            return {name: str(session.world.roles.get(name, "")) for name in session.world.nodes}
        if kind == "fault":
            return {
                str(fault.get("id")): f"{fault.get('kind')} {fault.get('target')}"
                for fault in session.world.faults
            }
        if kind == "time":
            return dict(self._times(session))
        if kind == "setting":
            return {f"{param.name}=": param.help for param in session.scenario.params}
        return {}

    def _all(self, session: Session, kind: str) -> list[str]:
        if kind == "branch":
            return branch_names(session.reader)
        if kind == "node":
            return list(session.world.nodes)
        if kind == "fault":
            return [str(fault.get("id")) for fault in session.world.faults]
        if kind == "time":
            return [text for text, _ in self._times(session)]
        if kind == "setting":
            return [f"{param.name}=" for param in session.scenario.params]
        return []

    def _times(self, session: Session) -> list[tuple[str, str]]:
        """Snapshot times (the cheapest seeks), the failure time and the end, in time order."""
        unit = session.display_unit
        marks: dict[int, str] = {}
        snapshots = session.snapshots()
        step = max(len(snapshots) // VALUES_MAX, 1)
        for info in snapshots[::step]:
            marks.setdefault(info.t_ns, f"snapshot {info.index}")
        failure = branch_failure(session)
        if failure is not None and isinstance(failure.get("t_ns"), int):
            marks[failure["t_ns"]] = "failure"
        end = session.end.t_ns
        marks[end] = "failure, end" if marks.get(end) == "failure" else "end"
        return [(format_time(t_ns, unit), marks[t_ns]) for t_ns in sorted(marks)][:VALUES_MAX]

    # -- the shell's plot: MetricSource ------------------------------------------------------------

    def branch_names(self) -> list[str]:
        session = self.session
        return branch_names(session.reader) if session is not None else []

    def metric_rows(self, branch: str, metric: str) -> list[list[Any]] | None:
        """A branch's series ``[[t_ns, node, value], ...]`` (None: no such metric or branch)."""
        session = self.session
        if session is None or branch not in branch_names(session.reader):
            return None
        if branch == session.branch:
            return _series(session, metric)
        with Session.open(
            session.reader.path, scenario=session.scenario, branch=branch, launch=session.launch
        ) as other:
            return _series(other, metric)


def _series(session: Session, metric: str) -> list[list[Any]] | None:
    if metric not in session.metric_names():
        return None
    return session.metric_series(metric)
