"""The TUI's bridge to the explore engine: one CommandContext, one lock, answers as screen data.

Every user gesture becomes a line of the command language (``goto 950ms``, ``goto #1200``,
``compare main b1``) and runs through :func:`~timetravel.explore.commands.run_line` here, exactly
as the shell and scripts run it; the TUI has no second path into the Session. An
:class:`Outcome` carries what the App needs: the result, its text (``render_text``), an error
line, and a new :class:`~timetravel.tui.model.CursorView` when the cursor, the branch, the branch
tree or the likelihood curve changed.

The App calls these methods on worker threads (a seek re-executes events; a branch runs a whole
future), never on the UI thread. A Session is not thread-safe (its reader is a file position),
so every method takes :attr:`Engine.lock`; the App runs one engine job at a time anyway, and the
lock makes that a rule rather than a habit. Nothing here imports textual.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from timetravel.explore.commands import CommandContext, CommandError, render_text, run_line
from timetravel.explore.commands.spec import ALIASES, COMMANDS
from timetravel.explore.compare_results import CompareResult, DiffCommandResult
from timetravel.explore.navigate import branch_failure
from timetravel.explore.paths import PathError, world_tree
from timetravel.explore.replay import ReplayDivergence
from timetravel.explore.results import LikelihoodResult
from timetravel.explore.session import Session
from timetravel.recording.format import RecordingError
from timetravel.scenarios import UnknownScenarioError
from timetravel.sim.scenario import ConfigError
from timetravel.sim.timefmt import TimeFormatError, format_time
from timetravel.tui.adapt import compare_data, likelihood_points
from timetravel.tui.model import BranchInfo, CompareData, CursorView, KernelSpan, RaceEdge
from timetravel.tui.session_view import BranchFacts, branch_facts, branch_rows, cursor_view
from timetravel.tui.spans import race_edges, sample_spans

COMMAND_ERRORS: tuple[type[BaseException], ...] = (
    CommandError,
    PathError,
    TimeFormatError,
    ReplayDivergence,
    RecordingError,
    UnknownScenarioError,
    ConfigError,
)
"""What a command line can fail with because of what was typed or recorded: shown as one line."""

Progress = Callable[[Any], None]
StopCheck = Callable[[], bool]


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def is_long(line: str) -> bool:
    """True when ``line`` runs a command that runs simulations (branch, fanout, minimize, ...)."""
    words = line.split()
    if not words:
        return False
    spec = COMMANDS.get(ALIASES.get(words[0], words[0]))
    return spec is not None and spec.long_running


def progress_text(progress: Any, default: str) -> tuple[str, float | None]:
    """What a progress report says, and how far (0..1) when the work knows its total.

    The engine reports :class:`WorkProgress`-like objects (``task``, ``done``, ``total``,
    ``detail``) for branches, fan-outs and searches, and the minimizer its own ``Progress``
    (``runs``, ``pass_name``, ``faults``), which has no total.
    """
    task = str(getattr(progress, "task", "") or default)
    done, total = getattr(progress, "done", None), getattr(progress, "total", None)
    if isinstance(done, int) and isinstance(total, int) and total > 0:
        detail = getattr(progress, "detail", "")
        text = f"{task} {done:,}/{total:,}" + (f" {detail}" if detail else "")
        return text, min(1.0, done / total)
    runs = getattr(progress, "runs", None)
    if isinstance(runs, int):
        words = [f"{task}: {runs} runs"]
        if getattr(progress, "pass_name", ""):
            words.append(f"pass {progress.pass_name}")
        if isinstance(getattr(progress, "faults", None), int):
            words.append(f"{progress.faults} faults")
        return " · ".join(words), None
    return task, None


def result_text(result: Any, unit: str) -> tuple[str, ...]:
    """The command language's text for ``result`` (its JSON for a type it cannot render yet)."""
    try:
        return tuple(render_text(result, unit))
    except TypeError:
        to_data = getattr(result, "to_data", None)
        return (repr(to_data() if callable(to_data) else result),)


@dataclass(frozen=True)
class DiffWorlds:
    """Both worlds at one time, for the side-by-side DiffScreen, and the paths that differ."""

    names: tuple[str, str]
    documents: tuple[Any, Any]
    path: str
    differing: tuple[str, ...]
    at_ns: int
    unit: str


@dataclass(frozen=True)
class Outcome:
    """What one job produced. ``lines`` are the command lines it ran, in order."""

    lines: tuple[str, ...] = ()
    results: tuple[Any, ...] = ()
    text: tuple[str, ...] = ()
    error: str | None = None
    view: CursorView | None = None
    compare: CompareData | None = None
    diff: DiffWorlds | None = None

    @property
    def result(self) -> Any:
        return self.results[-1] if self.results else None


@dataclass(frozen=True)
class Streams:
    """Kernel spans and races around the cursor at ``(branch, event)``."""

    branch: str
    event: int
    spans: tuple[KernelSpan, ...]
    races: tuple[RaceEdge, ...]


@dataclass
class Engine:
    """The open recording behind the TUI. See the module docstring."""

    context: CommandContext
    lock: threading.Lock = field(default_factory=threading.Lock)
    _facts: dict[str, BranchFacts] = field(default_factory=dict)
    _likelihood: dict[str, tuple[tuple[int, float], ...]] = field(default_factory=dict)
    _shown_key: tuple[Any, ...] = ()

    @property
    def session(self) -> Session:
        session: Session = self.context.require_session("tui")
        return session

    @property
    def unit(self) -> str:
        return self.context.display_unit

    @property
    def path(self) -> str:
        return str(self.session.reader.path)

    def time_text(self, t_ns: int) -> str:
        """``t_ns`` as the command language reads it back exactly (``950.5ms``)."""
        return format_time(t_ns, self.unit)

    # -- jobs (each takes the lock) ---------------------------------------------------------------

    def view(self) -> CursorView:
        """The view at the cursor, built whether or not anything changed (the first one)."""
        with self.lock:
            return self._build_view()

    def open_at_failure(self) -> Outcome:
        """The first view, with the cursor moved to the branch's failure when it has one: what a
        user opens a failing recording for (``goto T`` is in the outcome's lines, like a typed one)."""
        with self.lock:
            failure = branch_failure(self.session)
            if failure is None:
                return Outcome(view=self._build_view())
            line = f"goto {self.time_text(int(failure['t_ns']))}"
            result, error = self._run(line, None, None)
            text = result_text(result, self.unit) if error is None else ()
            results = (result,) if error is None else ()
            return Outcome((line,), results, text, error, self._build_view())

    def execute(
        self, line: str, progress: Progress | None = None, should_stop: StopCheck | None = None
    ) -> Outcome:
        """Run one command line; a new view comes with the outcome when what is shown changed."""
        with self.lock:
            result, error = self._run(line, progress, should_stop)
            text = result_text(result, self.unit) if error is None else ()
            return Outcome((line,), (result,) if error is None else (), text, error, self._view_if_changed())

    def compare(
        self, a: str, b: str, progress: Progress | None = None, should_stop: StopCheck | None = None
    ) -> Outcome:
        """``compare a b`` then ``diff a b``: the compare screen's data."""
        lines = (f"compare {a} {b}", f"diff {a} {b}")
        with self.lock:
            results: list[Any] = []
            text: list[str] = []
            for line in lines:
                result, error = self._run(line, progress, should_stop)
                if error is not None:
                    return Outcome(lines, tuple(results), tuple(text), error, self._view_if_changed())
                results.append(result)
                text += result_text(result, self.unit)
            compare, diff = results
            if not isinstance(compare, CompareResult) or not isinstance(diff, DiffCommandResult):
                raise TypeError(f"compare and diff returned {type(compare).__name__}, {type(diff).__name__}")
            changes = {row.name: row.changes for row in branch_rows(self.session)}
            data = compare_data(compare, diff, self.unit, changes, self.session.scenario.view.loss_metric)
            return Outcome(lines, tuple(results), tuple(text), None, self._view_if_changed(), compare=data)

    def open_diff(
        self,
        a: str,
        b: str,
        path: str,
        at_ns: int | None,
        progress: Progress | None = None,
        should_stop: StopCheck | None = None,
    ) -> Outcome:
        """One path of both worlds for the DiffScreen: ``diff a b --path P`` at the first divergence
        (``at_ns`` None: each side right after its diverging event, the states the compare screen
        listed) or ``diff a b --at T --path P``; then both worlds at those same moments."""
        where = "" if at_ns is None else f" --at {self.time_text(at_ns)}"
        line = f"diff {a} {b}{where} --path {path}"
        with self.lock:
            result, error = self._run(line, progress, should_stop)
            if error is not None:
                return Outcome((line,), (), (), error)
            if not isinstance(result, DiffCommandResult):
                raise TypeError(f"diff returned {type(result).__name__}")
            moments = diff_moments(result, at_ns)
            documents = (self._document_at(a, moments[0]), self._document_at(b, moments[1]))
            worlds = DiffWorlds(
                (a, b), documents, path, tuple(entry.path for entry in result.paths), result.at_ns, self.unit
            )
            return Outcome((line,), (result,), result_text(result, self.unit), None, diff=worlds)

    def follow(self) -> CursorView | None:
        """A recording still being written (``in_progress``): when the file has grown, open it
        again and keep the cursor where it stands, so that new events, snapshots and the failure
        appear without reopening; None when nothing changed (or the recording is finished)."""
        with self.lock:
            session = self.session
            if not session.info.in_progress:
                return None
            try:
                size = os.path.getsize(session.reader.path)
            except OSError:
                return None
            if size == session.reader.size:
                return None
            events = session.position.events
            session = self.context.reopen()
            if events:
                session.goto(f"#{min(events, session.end.events)}")
            self._facts.clear()
            return self._build_view()

    def streams(self) -> Streams:
        """Kernel spans around the cursor and the races among the branch's failures."""
        with self.lock:
            session = self.session
            spans = sample_spans(session)
            failures = list(session.failures())
            ended = self._branch_facts(session).failure
            if ended is not None and ended not in failures:
                failures.append(ended)
            position = session.position
            return Streams(position.branch, position.events, spans, race_edges(failures, spans))

    # -- inside the lock --------------------------------------------------------------------------

    def _run(
        self, line: str, progress: Progress | None, should_stop: StopCheck | None
    ) -> tuple[Any, str | None]:
        context = self.context
        context.progress, context.should_stop = progress, should_stop
        try:
            result = run_line(line, context)
        except COMMAND_ERRORS as error:
            return None, first_line(error)
        finally:
            context.progress = context.should_stop = None
        if isinstance(result, LikelihoodResult):
            self._likelihood[result.branch] = likelihood_points(result)
        return result, None

    def _branch_facts(self, session: Session) -> BranchFacts:
        facts = self._facts.get(session.branch)
        if facts is None or facts.events != session.end.events:
            facts = self._facts[session.branch] = branch_facts(session)
        return facts

    def _key(self, branches: Sequence[BranchInfo]) -> tuple[Any, ...]:
        session = self.session
        position = session.position
        likelihood = self._likelihood.get(session.branch, ())
        return (id(session), position, branches, len(likelihood))

    def _build_view(self) -> CursorView:
        session = self.session
        branches = branch_rows(session)
        self._shown_key = self._key(branches)
        return cursor_view(
            session,
            self._branch_facts(session),
            branches,
            likelihood=self._likelihood.get(session.branch, ()),
        )

    def _view_if_changed(self) -> CursorView | None:
        if self.context.session is None:
            return None
        if self._key(branch_rows(self.session)) == self._shown_key:
            return None
        return self._build_view()

    def _document_at(self, branch: str, moment: int | str) -> Any:
        """The world of ``branch`` at ``moment`` (a ``Session.goto`` target) as the inspector's
        document; the cursor stays where it is."""
        session = self.session
        with Session.open(
            session.reader.path, scenario=session.scenario, branch=branch, launch=session.launch
        ) as other:
            other.goto(moment)
            return world_tree(other.world)


def diff_moments(result: DiffCommandResult, at_ns: int | None) -> tuple[int | str, int | str]:
    """Where each side of a diff stands, as a ``Session.goto`` target: right after its diverging
    event (``#N``; just before the divergence's time on a side without that event), at ``at_ns``,
    or at the end when the two runs never diverge — the moments ``diff`` itself compares."""
    if at_ns is not None:
        return (at_ns, at_ns)
    divergence = result.first_divergence
    if divergence is None:
        return ("end", "end")
    before = max(divergence.t_ns - 1, 0)
    a, b = (
        f"#{event}" if event is not None else before for event in (divergence.event_a, divergence.event_b)
    )
    return (a, b)
