"""Completion for the command language, shared by the shell's completer and the TUI's command line.

:func:`completion_context` reads the text before the cursor and says *what* belongs at the
cursor: a command name, an option name, or a value of some kind (``branch``, ``node``, ``path``,
``time``, ...). :func:`complete` then offers candidates: command and option names from the specs,
predicate functions from the predicate language, and everything that depends on the open
recording (branch names, node names, state paths, fault ids, config keys, snapshot times) from a
:class:`ValueSource` the front end supplies — usually the Session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from timetravel.explore.commands.parse import CommandError, argument_at, resolve_command, split_words
from timetravel.explore.commands.spec import ALIASES, COMMANDS, CommandSpec, OptionSpec
from timetravel.explore.predicates import NUMBER_FUNCTIONS, TRUTH_FUNCTIONS

COMPLETIONS_MAX = 200
_PREDICATE_BREAK = re.compile(r"[\s(),<>=!]")


class ValueSource(Protocol):
    """Where session-dependent candidates come from: ``values("branch", "b")`` -> ``["b1", "b2"]``."""

    def values(self, kind: str, prefix: str) -> list[str]: ...


@dataclass(frozen=True)
class CompletionContext:
    """What belongs at the cursor: ``kind`` is ``command``, ``option`` or an argument kind."""

    kind: str
    prefix: str
    """The part of the current word to complete (the text the candidates must start with)."""
    command: CommandSpec | None = None
    option: OptionSpec | None = None


@dataclass(frozen=True)
class Completion:
    """A candidate: ``text`` replaces the last ``replace_chars`` characters before the cursor."""

    text: str
    replace_chars: int
    kind: str
    help: str = ""


def completion_context(text: str) -> CompletionContext | None:
    """What is being typed at the end of ``text`` (the text before the cursor); None if nothing fits."""
    command_text = text.rsplit(";", 1)[-1]
    try:
        words = split_words(command_text)
    except CommandError:
        return None
    if command_text and not command_text[-1].isspace() and words:
        current, before = words[-1], words[:-1]
    else:
        current, before = "", words
    if not before:
        return CompletionContext("command", current)
    try:
        spec = resolve_command(before[0])
    except CommandError:
        return None
    previous = before[-1] if len(before) > 1 else ""
    previous_option = spec.option(previous.partition("=")[0]) if previous.startswith("--") else None
    if previous_option is not None and not previous_option.is_flag and "=" not in previous:
        return CompletionContext(previous_option.kind or "word", current, spec, previous_option)
    if current.startswith("--"):
        name, equals, value = current.partition("=")
        option = spec.option(name)
        if equals and option is not None and not option.is_flag:
            return CompletionContext(option.kind or "word", value, spec, option)
        return CompletionContext("option", current, spec)
    argument = argument_at(spec, _positional_count(spec, before[1:]))
    if argument is None:
        return CompletionContext("option", current, spec) if current == "" else None
    return CompletionContext(argument.kind, current, spec)


def _positional_count(spec: CommandSpec, words: list[str]) -> int:
    count = 0
    index = 0
    while index < len(words):
        word = words[index]
        if word.startswith("--"):
            option = spec.option(word.partition("=")[0])
            index += 2 if option is not None and not option.is_flag and "=" not in word else 1
            continue
        count += 1
        index += 1
    return count


def complete(text: str, source: ValueSource | None = None) -> list[Completion]:
    """Candidates for the end of ``text``, in a stable order (at most COMPLETIONS_MAX)."""
    context = completion_context(text)
    if context is None:
        return []
    prefix = context.prefix
    if context.kind == "command":
        names = [*COMMANDS, *ALIASES]
        found = [
            Completion(n, len(prefix), "command", COMMANDS[ALIASES.get(n, n)].summary)
            for n in names
            if n.startswith(prefix)
        ]
    elif context.kind == "option":
        assert context.command is not None
        found = [
            Completion(o.name, len(prefix), "option", o.help)
            for o in context.command.options
            if o.name.startswith(prefix)
        ]
    elif context.kind == "predicate":
        found = _complete_predicate(prefix, source)
    else:
        values = source.values(context.kind, prefix) if source is not None else []
        found = [Completion(v, len(prefix), context.kind) for v in values if v.startswith(prefix)]
    return found[:COMPLETIONS_MAX]


def _complete_predicate(prefix: str, source: ValueSource | None) -> list[Completion]:
    """Inside a predicate complete the fragment after the last operator or parenthesis."""
    pieces = _PREDICATE_BREAK.split(prefix)
    fragment = pieces[-1] if pieces else ""
    inside_call = prefix[: len(prefix) - len(fragment)].rstrip().endswith("(")
    found: list[Completion] = []
    if "/" not in fragment and not inside_call:
        for name in (*TRUTH_FUNCTIONS, *NUMBER_FUNCTIONS):
            if name.startswith(fragment):
                found.append(Completion(f"{name}(", len(fragment), "function"))
    if source is not None:
        found += [
            Completion(v, len(fragment), "path")
            for v in source.values("path", fragment)
            if v.startswith(fragment)
        ]
    return found
