"""Run command texts through the engine and show what happened: a result, or a one-line error.

Both the REPL and batch mode come through here, so they agree on what a failure is:

* a **user error** (an unknown command, a bad time, a branch that does not exist, any type the
  engine lists in ``user_errors``) prints ``error: <the problem>`` — one line, never a traceback;
* anything else is a bug in timetravel or a scenario and prints ``internal error: Type: message
  (at file:line)`` — still one line, naming where it was raised, so it can be reported;
* a **replay mismatch** (a seek's re-execution departed from the recording: a finding about the
  code or the platform, not a wrong command; the engine lists such types in ``mismatch_errors``)
  prints ``mismatch: <where and why>``, one line;
* Ctrl-C during a command stops the command, not the shell (:mod:`timetravel.shell.monitor`):
  a long-running command ends early with what it has and ``stopped`` is printed after its
  result; any other command prints ``interrupted``. The REPL carries on.

In a script, the first failing command stops the script: the later commands usually depend on it
(``compare main b1`` after a ``branch`` that failed would only add a confusing second error).
The exit code is 0 when every command ran, 2 when a command failed, 1 on a replay mismatch
(as ``timetravel replay``), 130 when stopped or interrupted.

With ``program`` set (``timetravel shell`` in batch mode) every error line starts the way the
CLI's do: ``timetravel: error: script.tt:3: goto: ...``.
"""

from __future__ import annotations

import enum
import json
import traceback
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from rich.console import Console

from timetravel.shell.engine import Engine, ExitShell
from timetravel.shell.monitor import CommandMonitor
from timetravel.shell.prompt import prompt_text
from timetravel.shell.render import RenderContext, render
from timetravel.shell.render.safe_console import terminal_safe_console
from timetravel.shell.script import ScriptCommand, ScriptError, split_commands
from timetravel.sim.interruptions import Terminated

EXIT_OK = 0
EXIT_MISMATCH = 1
EXIT_COMMAND_FAILED = 2
EXIT_INTERRUPTED = 130
ERROR_CHARS_MAX = 500
"""A one-line error is cut to this length (an exception may carry a huge message)."""


class Status(enum.Enum):
    OK = "ok"
    USER_ERROR = "user error"
    INTERNAL_ERROR = "internal error"
    MISMATCH = "mismatch"
    INTERRUPTED = "interrupted"


EXIT_CODES = {
    Status.OK: EXIT_OK,
    Status.USER_ERROR: EXIT_COMMAND_FAILED,
    Status.INTERNAL_ERROR: EXIT_COMMAND_FAILED,
    Status.MISMATCH: EXIT_MISMATCH,
    Status.INTERRUPTED: EXIT_INTERRUPTED,
}
STOPPED_NOTE = "stopped: the result above covers the work done before Ctrl-C"


def one_line(message: str) -> str:
    """The first non-empty line of ``message``, cut to ``ERROR_CHARS_MAX`` characters."""
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    first = lines[0] if lines else ""
    return first if len(first) <= ERROR_CHARS_MAX else first[: ERROR_CHARS_MAX - 1] + "…"


def describe_internal_error(error: BaseException) -> str:
    """``Type: message (at file:line in function)``: enough to report a bug, in one line."""
    frames = traceback.extract_tb(error.__traceback__)
    where = (
        f" (at {frames[-1].filename.rpartition('/')[2]}:{frames[-1].lineno} in {frames[-1].name})"
        if frames
        else ""
    )
    message = one_line(str(error))
    return f"{type(error).__name__}{': ' + message if message else ''}{where}"


class CommandRunner:
    """Runs commands, renders results to ``console`` and errors to ``error_console``.

    ``monitor`` (when given) is the one whose hooks the engine's command context calls: the runner
    tells it when each command runs, so Ctrl-C and the progress line belong to that command.
    """

    def __init__(
        self,
        engine: Engine,
        console: Console,
        error_console: Console | None = None,
        json_output: bool = False,
        monitor: CommandMonitor | None = None,
        program: str = "",
    ) -> None:
        self.engine = engine
        self.console = terminal_safe_console(console)
        self.error_console = terminal_safe_console(error_console or console)
        self.json_output = json_output
        self.monitor = monitor
        self.program = program

    @property
    def context(self) -> RenderContext:
        return RenderContext(self.engine.display_unit, self.console.width)

    def _running(self, text: str) -> AbstractContextManager[None]:
        if self.monitor is None:
            return nullcontext()
        return self.monitor.running(self.engine.long_running(text))

    def run_one(self, text: str, where: str = "") -> Status:
        """Run one command and show its result or error. ``ExitShell`` passes through."""
        try:
            with self._running(text):
                result = self.engine.execute(text)
        except (ExitShell, Terminated):  # SIGTERM ends the shell; Ctrl-C only the command
            raise
        except KeyboardInterrupt:
            self._error(text, where, "interrupted")
            return Status.INTERRUPTED
        except self.engine.mismatch_errors as error:
            self._error(text, where, "mismatch", one_line(str(error)) or type(error).__name__)
            return Status.MISMATCH
        except Exception as error:
            if self._stopped():  # the work ended without a result because Ctrl-C asked it to
                self._error(text, where, "stopped", one_line(str(error)) or type(error).__name__)
                return Status.INTERRUPTED
            if isinstance(error, self.engine.user_errors):
                self._error(text, where, "error", one_line(str(error)) or type(error).__name__)
                return Status.USER_ERROR
            self._error(text, where, "internal error", describe_internal_error(error))
            return Status.INTERNAL_ERROR
        self.show(text, result)
        if self._stopped():
            self._error(text, where, STOPPED_NOTE)
            return Status.INTERRUPTED
        return Status.OK

    def _stopped(self) -> bool:
        return self.monitor is not None and self.monitor.stop_requested

    def show(self, text: str, result: object) -> None:
        if self.json_output:
            self._json({"command": text, "result": _data(result)})
            return
        renderable = render(result, self.context)
        if renderable is not None:
            self._print(renderable)

    def _print(self, renderable: Any) -> None:
        """Print to the console; off a terminal (a file, a pipe, a bug report) without the blanks
        that pad table cells to their column's width at the end of each line."""
        if self.console.is_terminal:
            self.console.print(renderable)
            return
        with self.console.capture() as captured:
            self.console.print(renderable)
        text = "\n".join(line.rstrip() for line in captured.get().split("\n"))
        self.console.file.write(text)
        self.console.file.flush()

    def _error(self, text: str, where: str, kind: str, problem: str = "") -> None:
        """``where: kind: problem`` (``program: kind: where: problem`` when ``program`` is set)."""
        message = f"{kind}: {problem}" if problem else kind
        if self.json_output:
            self._json({"command": text, "error": message})
        if self.program:
            place = f"{where}: " if where else ""
            line = (
                f"{self.program}: {kind}: {place}{problem}" if problem else f"{self.program}: {place}{kind}"
            )
        else:
            line = f"{where}: {message}" if where else message
        self.console.file.flush()  # the echoed command first, also when both streams go to one pipe
        self.error_console.print(line, style="red", markup=False, highlight=False, soft_wrap=True)

    def _json(self, value: Any) -> None:
        """One JSON object per line on the console's file (never wrapped or highlighted)."""
        self.console.file.write(json.dumps(value, separators=(", ", ": ")) + "\n")
        self.console.file.flush()

    def run_line(self, line: str) -> Status:
        """A typed line: one or more commands separated by ``;``; stops at the first failure."""
        try:
            commands = split_commands(line, "line")
        except ScriptError as error:
            self._error(line, "", "error", error.problem)
            return Status.USER_ERROR
        return self.run_commands(commands, echo=False, with_location=False)

    def run_commands(
        self, commands: Sequence[ScriptCommand], echo: bool, with_location: bool = True
    ) -> Status:
        for command in commands:
            if echo and not self.json_output:
                self.console.print(
                    f"{prompt_text(self.engine.prompt_state())}{command.text}",
                    style="bold",
                    markup=False,
                    highlight=False,
                )
            status = self.run_one(command.text, command.where if with_location else "")
            if status is not Status.OK:
                return status
        return Status.OK

    def run_script(self, text: str, source: str, echo: bool = True) -> int:
        """Batch mode: every command of ``text`` in order, stopping at the first failure; the exit code."""
        try:
            commands = split_commands(text, source)
        except ScriptError as error:
            self._error("", error.where, "error", error.problem)
            return EXIT_COMMAND_FAILED
        try:
            status = self.run_commands(commands, echo)
        except ExitShell:
            return EXIT_OK
        return EXIT_CODES[status]


def _data(result: object) -> Any:
    if result is None or isinstance(result, (str, int, float, bool)):
        return result
    to_data = getattr(result, "to_data", None)
    return to_data() if callable(to_data) else str(result)
