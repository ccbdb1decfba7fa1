"""The shell: a gdb-like prompt_toolkit REPL and batch runner over the shared command language.

Only this package imports prompt_toolkit. The shell implements no command: it parses nothing
itself beyond splitting ``;``, hands each command to an :class:`~timetravel.shell.engine.Engine`
(the explore layer's Session and command objects), and renders the structured results with rich
(:mod:`timetravel.shell.render`). What it adds is the interaction: fuzzy completion driven by the
command specs' argument kinds, a prompt that shows the cursor, persistent bounded history,
one-line errors, a terminal plot of metric curves, batch mode with exit codes, progress and
Ctrl-C for long commands (:mod:`timetravel.shell.monitor`), and :class:`Shell` for Python and
Jupyter. ``timetravel shell PATH`` (``timetravel/cli/shell_command.py``) puts them together.
"""

from timetravel.shell.completion import (
    Candidate,
    EmptySource,
    NotedValueSource,
    Vocabulary,
    complete,
    language_vocabulary,
)
from timetravel.shell.embed import Shell
from timetravel.shell.engine import Engine, ExitShell
from timetravel.shell.history import BoundedFileHistory, default_history_path
from timetravel.shell.language import LanguageEngine, MetricSource, recording_engine
from timetravel.shell.monitor import CommandMonitor
from timetravel.shell.prompt import PromptState, prompt_text
from timetravel.shell.repl import Repl
from timetravel.shell.runner import EXIT_COMMAND_FAILED, EXIT_OK, CommandRunner, Status

__all__ = [
    "EXIT_COMMAND_FAILED",
    "EXIT_OK",
    "BoundedFileHistory",
    "Candidate",
    "CommandMonitor",
    "CommandRunner",
    "EmptySource",
    "Engine",
    "ExitShell",
    "LanguageEngine",
    "MetricSource",
    "NotedValueSource",
    "PromptState",
    "Repl",
    "Shell",
    "Status",
    "Vocabulary",
    "complete",
    "default_history_path",
    "language_vocabulary",
    "prompt_text",
    "recording_engine",
]
