"""The words of a half-typed line, as completion needs them.

The command language splits a line like a POSIX shell (quotes group, a backslash escapes, ``;``
separates commands). Completion sees the line *while it is typed*, so quotes may still be open
and the last word unfinished; ``shlex`` raises on that, so this module scans the text itself,
with the same rules, and never fails. It returns the finished words of the command under the
cursor (after the last ``;``) and the partial word being typed, with how many characters of raw
text that partial occupies (the span a completion replaces).
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

SEPARATOR = ";"
QUOTES = "'\""
_NEEDS_QUOTING = set(" \t\n;'\"\\")


@dataclass(frozen=True)
class LineState:
    words: tuple[str, ...]
    """The finished words of the command the cursor is in (the command name first)."""
    partial: str
    """The word being typed, unquoted ('' right after a space)."""
    partial_raw_length: int
    """Characters of the typed text that the partial word spans, quotes and escapes included."""


def line_state(text: str) -> LineState:
    """Split ``text`` (the line up to the cursor) into finished words and the partial word."""
    words: list[str] = []
    buffer: list[str] = []
    started = False
    raw_start = 0
    quote: str | None = None
    escaped = False
    for index, character in enumerate(text):
        if escaped:
            buffer.append(character)
            escaped = False
        elif quote is not None:
            if character == quote:
                quote = None
            elif character == "\\" and quote == '"':
                escaped = True
            else:
                buffer.append(character)
        elif character.isspace() or character == SEPARATOR:
            if started:
                words.append("".join(buffer))
                buffer, started = [], False
            if character == SEPARATOR:
                words = []
        else:
            if not started:
                started, raw_start = True, index
            if character in QUOTES:
                quote = character
            elif character == "\\":
                escaped = True
            else:
                buffer.append(character)
    if not started:
        return LineState(tuple(words), "", 0)
    return LineState(tuple(words), "".join(buffer), len(text) - raw_start)


def quote_word(word: str) -> str:
    """``word`` as it must be typed to stay one word (quoted only when it has to be)."""
    if word and not (_NEEDS_QUOTING & set(word)):
        return word
    return shlex.quote(word)


def split_raw_commands(line: str) -> tuple[list[str], bool]:
    """The raw text of each ``;``-separated command of ``line`` (stripped, empty ones dropped),
    and whether a quote was left open. The text is kept as typed, so an echo shows what was typed.
    """
    commands: list[str] = []
    start = 0
    quote: str | None = None
    escaped = False
    for index, character in enumerate(line):
        if escaped:
            escaped = False
        elif character == "\\" and quote != "'":
            escaped = True
        elif quote is not None:
            if character == quote:
                quote = None
        elif character in QUOTES:
            quote = character
        elif character == SEPARATOR:
            commands.append(line[start:index].strip())
            start = index + 1
    commands.append(line[start:].strip())
    return [command for command in commands if command], quote is not None or escaped
