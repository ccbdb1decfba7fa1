"""Batch input: a ``-c`` string, a ``--script`` file or a typed line, split into commands.

``;`` separates commands and so does a line break; a line whose first non-blank character is
``#`` is a comment (only a whole line: ``#4096`` is an event number, so ``goto #4096`` must
stay a command); blank lines are skipped. Quotes group as in a POSIX shell, so ``;`` inside
quotes is not a separator. Each command keeps the line it came from, so an error in a script
says ``script.tt:12: ...``.
"""

from __future__ import annotations

from dataclasses import dataclass

from timetravel.shell.words import split_raw_commands

SCRIPT_COMMANDS_MAX = 1_000
SCRIPT_CHARS_MAX = 1_000_000
COMMENT = "#"


class ScriptError(ValueError):
    """A script that cannot be split into commands (an unclosed quote, too long)."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


@dataclass(frozen=True)
class ScriptCommand:
    """One command of a script: its text and where it came from."""

    text: str
    line: int
    source: str

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def split_commands(text: str, source: str = "-c") -> list[ScriptCommand]:
    """The commands of ``text`` in order (see the module docstring)."""
    if len(text) > SCRIPT_CHARS_MAX:
        raise ScriptError(source, f"longer than {SCRIPT_CHARS_MAX} characters")
    commands: list[ScriptCommand] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.lstrip().startswith(COMMENT):
            continue
        texts, unclosed = split_raw_commands(line)
        if unclosed:
            raise ScriptError(f"{source}:{number}", "unclosed quote or trailing backslash")
        commands.extend(ScriptCommand(command, number, source) for command in texts)
        if len(commands) > SCRIPT_COMMANDS_MAX:
            raise ScriptError(source, f"more than {SCRIPT_COMMANDS_MAX} commands")
    return commands
