"""The command language: one parser and one set of commands for the TUI, the shell, scripts and Python.

    from timetravel.explore.commands import RecordingValues, open_context, render_text, run_line
    with open_context("run.ttr") as context:            # or CommandContext(session=Session.open(...))
        result = run_line("goto 950", context)          # a result dataclass (here CursorResult)
        print("\n".join(render_text(result, context.display_unit)))
        completions = complete("print nodes/", RecordingValues(context))

``parse``/``parse_script`` turn text into :class:`Invocation` objects (typed, checked);
``execute`` runs one and returns a result dataclass from :mod:`timetravel.explore.results`;
``complete`` and ``completion_context`` serve completion; ``COMMAND_SPECS`` is the table of
commands, arguments, options and their kinds that help, completion and palettes read.
"""

from timetravel.explore.commands import (  # noqa: F401  (importing them registers their handlers)
    explain,
    futures,
    navigation,
    repro,
    search,
)
from timetravel.explore.commands.binding import RecordingValues, open_context
from timetravel.explore.commands.complete import (
    Completion,
    CompletionContext,
    ValueSource,
    complete,
    completion_context,
)
from timetravel.explore.commands.parse import (
    CommandError,
    Invocation,
    Moment,
    parse,
    parse_moment,
    parse_script,
)
from timetravel.explore.commands.render import render_text
from timetravel.explore.commands.run import CommandContext, execute, register_handler, run_line
from timetravel.explore.commands.spec import (
    ARGUMENT_KINDS,
    COMMAND_NAMES,
    COMMAND_SPECS,
    COMMANDS,
    ArgumentSpec,
    CommandSpec,
    OptionSpec,
)

__all__ = [
    "ARGUMENT_KINDS",
    "COMMANDS",
    "COMMAND_NAMES",
    "COMMAND_SPECS",
    "ArgumentSpec",
    "CommandContext",
    "CommandError",
    "CommandSpec",
    "Completion",
    "CompletionContext",
    "Invocation",
    "Moment",
    "OptionSpec",
    "RecordingValues",
    "ValueSource",
    "complete",
    "completion_context",
    "execute",
    "open_context",
    "parse",
    "parse_moment",
    "parse_script",
    "register_handler",
    "render_text",
    "run_line",
]
