"""The engine behind ``timetravel shell``: the shared command language over an open Session.

A command's text goes to the language's own parser and handlers (``run_line`` with a
``CommandContext``) — the same objects the TUI's command line calls — so the shell has no
implementation of any command that acts on a recording. It intercepts only its own commands
(:mod:`timetravel.shell.commands`: ``plot``, ``quit``, and ``help`` so the list includes them).

The prompt's cursor comes from the language too: after each command the engine runs ``where``
and keeps the ``CursorResult``, so the prompt never reaches into the Session's internals.

A command interrupted by Ctrl-C (``KeyboardInterrupt`` raised in the middle of a seek) may leave
the world half way through an event. The engine then reopens the recording on the branch the
cursor was on and seeks back to the event it stood after, so the next command starts from a
world the recording vouches for.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from timetravel.explore.commands import CommandContext, CommandError, RecordingValues, ValueSource, run_line
from timetravel.explore.commands.parse import split_words
from timetravel.explore.paths import PathError
from timetravel.explore.replay import ReplayDivergence
from timetravel.explore.results import CursorResult, HelpResult
from timetravel.shell.commands import (
    PLOT_SPEC,
    QUIT_SPEC,
    SHELL_OPTION_KINDS,
    SHELL_SPECS,
    MetricRows,
    parse_shell_command,
    plot_result,
    shell_help,
    shell_spec,
    with_shell_commands,
)
from timetravel.shell.completion import EmptySource, Vocabulary, language_vocabulary
from timetravel.shell.engine import ExitShell
from timetravel.shell.prompt import PromptState
from timetravel.shell.script import ScriptError
from timetravel.sim.encoding import DecodeError
from timetravel.sim.scenario import ConfigError
from timetravel.sim.timefmt import TimeFormatError

LANGUAGE_USER_ERRORS: tuple[type[BaseException], ...] = (
    CommandError,
    ScriptError,
    TimeFormatError,
    PathError,
    ConfigError,
    DecodeError,
    FileNotFoundError,
    FileExistsError,
    IsADirectoryError,
    NotADirectoryError,
    PermissionError,
)
"""What a wrong command raises: shown as one ``error:`` line (a caller adds its own types)."""
LANGUAGE_MISMATCH_ERRORS: tuple[type[BaseException], ...] = (ReplayDivergence,)
"""A seek whose re-execution departed from the recording: shown as one ``mismatch:`` line."""


class MetricSource(Protocol):
    """What ``plot`` reads: the branches, and one branch's series of a metric (None: no such metric)."""

    def branch_names(self) -> Sequence[str]: ...

    def metric_rows(self, branch: str, metric: str) -> MetricRows | None: ...


class ShellValues:
    """The language's values for completion, plus the metric names the shell's ``plot --metric`` takes."""

    def __init__(self, source: ValueSource, context: CommandContext) -> None:
        self.source = source
        self.context = context

    def values(self, kind: str, prefix: str) -> list[str]:
        if kind == "metric":
            session = self.context.session
            names = session.metric_names() if session is not None else []
            return [name for name in names if name.startswith(prefix)]
        return self.source.values(kind, prefix)

    def notes(self, kind: str) -> Mapping[str, str]:
        notes_of = getattr(self.source, "notes", None)
        return notes_of(kind) if callable(notes_of) and kind != "metric" else {}


class LanguageEngine:
    """An :class:`~timetravel.shell.engine.Engine` that runs the command language."""

    def __init__(
        self,
        context: CommandContext,
        source: ValueSource | None = None,
        metrics: MetricSource | None = None,
        user_errors: tuple[type[BaseException], ...] = (),
    ) -> None:
        self.context = context
        self.source: ValueSource = source if source is not None else EmptySource()
        self.metrics = metrics
        self._user_errors = LANGUAGE_USER_ERRORS + tuple(
            e for e in user_errors if e not in LANGUAGE_USER_ERRORS
        )
        self._vocabulary = language_vocabulary(SHELL_SPECS, SHELL_OPTION_KINDS)
        self._cursor: CursorResult | None = None
        self.refresh_cursor()

    @property
    def vocabulary(self) -> Vocabulary:
        return self._vocabulary

    @property
    def display_unit(self) -> str:
        return self.context.display_unit

    @property
    def user_errors(self) -> tuple[type[BaseException], ...]:
        return self._user_errors

    @property
    def mismatch_errors(self) -> tuple[type[BaseException], ...]:
        return LANGUAGE_MISMATCH_ERRORS

    def completion_source(self) -> ValueSource:
        return ShellValues(self.source, self.context)

    def long_running(self, text: str) -> bool:
        try:
            words = split_words(text)
        except CommandError:
            return False
        spec = self._vocabulary.resolve(words[0]) if words else None
        return spec is not None and spec.long_running

    def execute(self, text: str) -> object:
        words = split_words(text)
        if not words:
            raise CommandError("empty command (try `help`)")
        before = self._cursor
        try:
            return self._dispatch(text, words)
        except KeyboardInterrupt:
            self._restore(before)
            raise
        finally:
            self.refresh_cursor()

    def _restore(self, cursor: CursorResult | None) -> None:
        """After an interrupt: the recording reopened on ``cursor``'s branch, the cursor back at its event."""
        if self.context.session is None or cursor is None:
            return
        session = self.context.reopen(cursor.branch)
        session.goto_event(cursor.event)

    def _dispatch(self, text: str, words: list[str]) -> object:
        own = shell_spec(words[0])
        if own is QUIT_SPEC:
            parse_shell_command(words, self.display_unit)
            raise ExitShell()
        if own is PLOT_SPEC:
            return self._plot(words)
        asks_help = self._vocabulary.aliases.get(words[0], words[0]) == "help"
        if asks_help and len(words) == 2 and (wanted := shell_spec(words[1])) is not None:
            return shell_help(wanted)
        result = run_line(text, self.context)
        return (
            with_shell_commands(result)
            if asks_help and isinstance(result, HelpResult) and not result.detail
            else result
        )

    def _plot(self, words: list[str]) -> object:
        invocation = parse_shell_command(words, self.display_unit)
        self.context.require_session("plot")
        if self.metrics is None:
            raise CommandError("plot: this session has no metric curves")
        return plot_result(
            invocation, list(self.metrics.branch_names()), self.metrics.metric_rows, self._metric_names()
        )

    def _metric_names(self) -> list[str]:
        session = self.context.session
        return list(session.metric_names()) if session is not None else []

    def refresh_cursor(self) -> None:
        """Ask the language where the cursor is (kept for the prompt; unchanged if that fails)."""
        if self.context.session is None:
            return
        try:
            result: Any = run_line("where", self.context)
        except Exception:  # the prompt must not fail because `where` did; the last cursor stays
            return
        if isinstance(result, CursorResult):
            self._cursor = result

    def prompt_state(self) -> PromptState:
        cursor = self._cursor
        if cursor is None:
            return PromptState("", 0, 0, unit=self.display_unit)
        failure = cursor.failure
        failed = failure is not None and int(failure.get("t_ns", 0)) <= cursor.t_ns
        return PromptState(cursor.branch, cursor.t_ns, cursor.event, failed, self.display_unit)


def recording_engine(
    context: CommandContext, user_errors: tuple[type[BaseException], ...] = ()
) -> LanguageEngine:
    """The engine over an open recording: completion and ``plot`` read it through RecordingValues,
    which follows the context across branch switches and reopens."""
    values = RecordingValues(context)
    return LanguageEngine(context, source=values, metrics=values, user_errors=user_errors)
