"""The interactive loop: a prompt_toolkit prompt over the engine, gdb-style.

Each line is run by :class:`~timetravel.shell.runner.CommandRunner` (the same path batch mode
takes). The prompt shows the cursor's branch and time; Tab (or just typing) opens fuzzy
completion; the toolbar at the bottom shows the usage of the command being typed and what the
slot under the cursor expects; Up and Ctrl-R search the persistent history, and a grey
suggestion from history can be taken with the right arrow. Ctrl-C clears the line (or stops a
running command); Ctrl-D or ``quit`` leaves.
"""

from __future__ import annotations

from prompt_toolkit import PromptSession
from prompt_toolkit.auto_suggest import AutoSuggestFromHistory
from prompt_toolkit.formatted_text import FormattedText
from prompt_toolkit.history import History, InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.output import Output
from prompt_toolkit.styles import Style

from timetravel.shell.completer import ShellCompleter
from timetravel.shell.completion import Vocabulary, find_slot
from timetravel.shell.engine import ExitShell
from timetravel.shell.history import BoundedFileHistory
from timetravel.shell.prompt import PROMPT_STYLE, prompt_fragments
from timetravel.shell.runner import EXIT_OK, CommandRunner
from timetravel.shell.words import line_state
from timetravel.sim.interruptions import Terminated

IDLE_HINT = "Tab completes · help lists the commands · help COMMAND explains one · Ctrl-D quits"


def toolbar_text(text_before_cursor: str, vocabulary: Vocabulary) -> str:
    """The usage of the command under the cursor and what its current slot expects."""
    state = line_state(text_before_cursor)
    if not state.words:
        command = vocabulary.resolve(state.partial) if state.partial else None
        return f"{command.usage}  —  {command.summary}" if command is not None else IDLE_HINT
    slot = find_slot(state.words, state.partial, vocabulary)
    if slot.command is None:
        return f"unknown command {state.words[0]!r} (help lists the commands)"
    if slot.help and slot.help != slot.command.usage:
        return f"{slot.command.usage}  —  {slot.help}"
    return slot.command.usage


class Repl:
    """The read-eval-print loop. ``input``/``output`` are for tests (pipe input, DummyOutput)."""

    def __init__(
        self,
        runner: CommandRunner,
        history: History | None = None,
        input: Input | None = None,
        output: Output | None = None,
    ) -> None:
        self.runner = runner
        self.engine = runner.engine
        self.history = history if history is not None else InMemoryHistory()
        self._warned_history = False
        self.session: PromptSession[str] = PromptSession(
            message=self._message,
            completer=ShellCompleter(self.engine.vocabulary, self.engine.completion_source),
            complete_while_typing=True,
            history=self.history,
            auto_suggest=AutoSuggestFromHistory(),
            bottom_toolbar=self._toolbar,
            style=Style.from_dict(PROMPT_STYLE),
            input=input,
            output=output,
        )

    def _message(self) -> FormattedText:
        return prompt_fragments(self.engine.prompt_state())

    def _toolbar(self) -> str:
        return toolbar_text(self.session.default_buffer.document.text_before_cursor, self.engine.vocabulary)

    def run(self) -> int:
        """Read and run lines until Ctrl-D or ``quit``; the exit code (0)."""
        while True:
            try:
                line = self.session.prompt()
            except Terminated:  # SIGTERM ends the shell (cli/interrupts.py); Ctrl-C only the line
                raise
            except KeyboardInterrupt:
                continue
            except EOFError:
                return EXIT_OK
            try:
                self.runner.run_line(line)
            except ExitShell:
                return EXIT_OK
            self._warn_history()

    def _warn_history(self) -> None:
        if (
            isinstance(self.history, BoundedFileHistory)
            and self.history.write_error
            and not self._warned_history
        ):
            self._warned_history = True
            self.runner.error_console.print(
                f"warning: {self.history.write_error}", style="yellow", markup=False
            )
