"""What the shell needs from the engine behind it: run a command, say where the cursor is, complete.

The shell implements no command. It hands each command's text to an :class:`Engine` — in
``timetravel shell`` the explore layer's Session and its command objects, the very ones the TUI's
command line runs — and renders what comes back. Keeping this seam narrow is what lets the REPL,
the batch runner and the completer be tested without a recording, and keeps one implementation
of every command.
"""

from __future__ import annotations

from typing import Protocol

from timetravel.explore.commands import ValueSource
from timetravel.shell.completion import Vocabulary
from timetravel.shell.prompt import PromptState


class ExitShell(Exception):
    """Raised by the ``quit`` command: the REPL ends, a script stops with exit code 0."""


class Engine(Protocol):
    @property
    def vocabulary(self) -> Vocabulary:
        """The commands (with their argument kinds) that completion and ``help`` know."""
        ...

    @property
    def display_unit(self) -> str: ...

    @property
    def user_errors(self) -> tuple[type[BaseException], ...]:
        """Exception types that mean "this command is wrong" (shown as ``error: ...``, exit code 2)."""
        ...

    @property
    def mismatch_errors(self) -> tuple[type[BaseException], ...]:
        """Exception types that report a replay that departed from its recording (a finding about
        the code, not a wrong command): shown as ``mismatch: ...``, exit code 1."""
        ...

    def long_running(self, text: str) -> bool:
        """Does this command run simulations (so Ctrl-C asks it to stop rather than interrupting)?"""
        ...

    def execute(self, text: str) -> object:
        """Run one command (no ``;``) and return its structured result (or None).

        On ``KeyboardInterrupt`` the engine leaves itself usable (the cursor where it was) and
        lets the interrupt pass."""
        ...

    def prompt_state(self) -> PromptState: ...

    def completion_source(self) -> ValueSource: ...
