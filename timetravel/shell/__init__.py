"""The shell: a gdb-like prompt_toolkit REPL and batch runner over the shared command language.

Only this package imports prompt_toolkit. The shell implements no command: it parses nothing
itself beyond splitting ``;``, hands each command to an :class:`~timetravel.shell.engine.Engine`
(the explore layer's Session and command objects), and renders the structured results with rich
(:mod:`timetravel.shell.render`). What it adds is the interaction: fuzzy completion driven by the
command specs' argument kinds, a prompt that shows the cursor, persistent bounded history,
one-line errors, a terminal plot of metric curves, and batch mode with exit codes.
"""

from timetravel.shell.completion import (
    Candidate,
    EmptySource,
    NotedValueSource,
    Vocabulary,
    complete,
    language_vocabulary,
)
from timetravel.shell.engine import Engine, ExitShell
from timetravel.shell.history import BoundedFileHistory, default_history_path
from timetravel.shell.language import LanguageEngine, MetricSource
from timetravel.shell.prompt import PromptState, prompt_text
from timetravel.shell.repl import Repl
from timetravel.shell.runner import EXIT_COMMAND_FAILED, EXIT_OK, CommandRunner, Status

__all__ = [
    "EXIT_COMMAND_FAILED",
    "EXIT_OK",
    "BoundedFileHistory",
    "Candidate",
    "CommandRunner",
    "EmptySource",
    "Engine",
    "ExitShell",
    "LanguageEngine",
    "MetricSource",
    "NotedValueSource",
    "PromptState",
    "Repl",
    "Status",
    "Vocabulary",
    "complete",
    "default_history_path",
    "language_vocabulary",
    "prompt_text",
]
