"""The command language: one parser and one set of commands for the TUI, the shell, scripts and Python.

    from timetravel.explore.commands import CommandContext, run_line, render_text
    context = CommandContext(session=session)
    result = run_line("find-first nonfinite(nodes/*/weights)", context)
    print("\n".join(render_text(result, context.display_unit)))

``parse``/``parse_script`` turn text into :class:`Invocation` objects (typed, checked);
``execute`` runs one and returns a result dataclass from :mod:`timetravel.explore.results`;
``complete`` and ``completion_context`` serve completion; ``COMMAND_SPECS`` is the table of
commands, arguments, options and their kinds that help, completion and palettes read.
"""

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
    "ValueSource",
    "complete",
    "completion_context",
    "execute",
    "parse",
    "parse_moment",
    "parse_script",
    "register_handler",
    "render_text",
    "run_line",
]
