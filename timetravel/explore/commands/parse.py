"""One parser for every front end: a line of text to an :class:`Invocation` of a command spec.

Words are split like a POSIX shell (quotes group, backslash escapes), so ``branch --add-fault
'{"kind": "drop", "target": "rank2"}'`` works as typed. ``;`` separates commands in a script
(``goto 950; branch --branch-seed 1; compare main b1``). Values are checked and typed here —
times, counts, paths, predicates, JSON — so a mistake is one line naming the word, before any
simulation runs. What needs the session (does branch ``b7`` exist?) is checked when it runs.
"""

from __future__ import annotations

import difflib
import json
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from timetravel.explore.commands.spec import ALIASES, COMMANDS, ArgumentSpec, CommandSpec, OptionSpec
from timetravel.explore.fault_changes import parse_fault_edit, parse_fault_spec
from timetravel.explore.paths import PathError, parse_path
from timetravel.explore.predicates import parse_predicate
from timetravel.sim.timefmt import DISPLAY_UNIT_DEFAULT, TimeFormatError, parse_time

LINE_CHARS_MAX = 10_000
SCRIPT_COMMANDS_MAX = 1_000
JSON_CHARS_MAX = 100_000
SEPARATOR = ";"


class CommandError(ValueError):
    """A command line that cannot run; the one-line message names the word and the problem."""


@dataclass(frozen=True)
class Moment:
    """A point on a branch: a time in nanoseconds, or an event number (``#N``)."""

    t_ns: int | None = None
    event: int | None = None

    def __post_init__(self) -> None:
        assert (self.t_ns is None) != (self.event is None), "a moment is a time or an event number"

    def __str__(self) -> str:
        return f"#{self.event}" if self.event is not None else f"{self.t_ns}ns"


@dataclass(frozen=True)
class Invocation:
    """A parsed command: its spec, typed arguments and options, and the text it came from."""

    spec: CommandSpec
    arguments: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)
    text: str = ""

    @property
    def name(self) -> str:
        return self.spec.name

    def value(self, name: str, default: Any = None) -> Any:
        """An argument or option value by name (``drop_fault`` for ``--drop-fault``)."""
        if name in self.arguments:
            return self.arguments[name]
        return self.options.get(name, default)


def split_words(text: str) -> list[str]:
    """Shell-like words of one line (``;`` kept as a word of its own)."""
    if len(text) > LINE_CHARS_MAX:
        raise CommandError(f"command line longer than {LINE_CHARS_MAX} characters")
    lexer = shlex.shlex(text, posix=True, punctuation_chars=SEPARATOR)
    lexer.whitespace_split = True
    lexer.commenters = ""
    try:
        return list(lexer)
    except ValueError as error:
        raise CommandError(f"cannot split the line into words: {error}") from None


def parse_script(text: str, display_unit: str = DISPLAY_UNIT_DEFAULT) -> list[Invocation]:
    """Every command of a script: lines and ``;`` separate commands; ``#`` starts a comment line."""
    invocations: list[Invocation] = []
    for line in text.splitlines():
        if line.strip().startswith("#") and not line.strip().startswith("#!"):
            continue
        words = split_words(line)
        command: list[str] = []
        for word in [*words, SEPARATOR]:
            if word != SEPARATOR:
                command.append(word)
                continue
            if command:
                invocations.append(parse_words(command, display_unit, shlex.join(command)))
                command = []
            if len(invocations) > SCRIPT_COMMANDS_MAX:
                raise CommandError(f"a script holds at most {SCRIPT_COMMANDS_MAX} commands")
    return invocations


def parse(text: str, display_unit: str = DISPLAY_UNIT_DEFAULT) -> Invocation:
    """Exactly one command (a line with ``;`` is a script: use :func:`parse_script`)."""
    words = split_words(text)
    if SEPARATOR in words:
        raise CommandError("one command expected; use parse_script for several separated by ';'")
    if not words:
        raise CommandError("empty command (try `help`)")
    return parse_words(words, display_unit, text.strip())


def resolve_command(name: str) -> CommandSpec:
    spec = COMMANDS.get(ALIASES.get(name, name))
    if spec is None:
        close = difflib.get_close_matches(name, list(COMMANDS), n=1)
        hint = f" (did you mean `{close[0]}`?)" if close else " (try `help`)"
        raise CommandError(f"unknown command {name!r}{hint}")
    return spec


def parse_words(
    words: Sequence[str],
    display_unit: str = DISPLAY_UNIT_DEFAULT,
    text: str = "",
    spec: CommandSpec | None = None,
) -> Invocation:
    """One command's words: ``words[0]`` names the language's command, or ``spec`` (a front end's own
    command, such as the shell's ``plot``) is the command that name stands for."""
    words = list(words)
    spec = spec if spec is not None else resolve_command(words[0])
    positional: list[str] = []
    options: dict[str, Any] = {}
    index = 1
    while index < len(words):
        word = words[index]
        rest_started = bool(positional) and any(argument.rest for argument in spec.arguments)
        known = spec.option(word.partition("=")[0]) is not None
        if word.startswith("--") and len(word) > 2 and (known or not rest_started):
            index = _parse_option(spec, words, index, options, display_unit)
            continue
        positional.append(word)
        index += 1
    arguments = _bind_arguments(spec, positional, display_unit)
    return Invocation(spec, arguments, options, text or shlex.join(words))


def _parse_option(
    spec: CommandSpec, words: list[str], index: int, options: dict[str, Any], display_unit: str
) -> int:
    name, equals, inline_value = words[index].partition("=")
    option = spec.option(name)
    if option is None:
        known = [o.name for o in spec.options]
        close = [o for o in known if o.startswith(name)] or difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]}?)" if close else f" (options: {', '.join(known) or 'none'})"
        raise CommandError(f"{spec.name}: unknown option {name}{hint}")
    if option.is_flag:
        if equals:
            raise CommandError(f"{spec.name}: {name} takes no value")
        options[option.key] = True
        return index + 1
    if equals:
        text, next_index = inline_value, index + 1
    elif index + 1 < len(words):
        text, next_index = words[index + 1], index + 2
    else:
        raise CommandError(f"{spec.name}: {name} needs a value ({option.kind})")
    value = convert(option.kind or "word", text, display_unit, f"{spec.name} {name}")
    if option.repeat:
        options.setdefault(option.key, []).append(value)
    elif option.key in options:
        raise CommandError(f"{spec.name}: {name} given twice")
    else:
        options[option.key] = value
    return next_index


def _bind_arguments(spec: CommandSpec, positional: list[str], display_unit: str) -> dict[str, Any]:
    arguments: dict[str, Any] = {}
    remaining = list(positional)
    for argument in spec.arguments:
        if not remaining:
            if argument.required:
                raise CommandError(
                    f"{spec.name}: missing {argument.name.upper()} ({argument.help}); usage: {spec.usage}"
                )
            continue
        taken, remaining = (remaining, []) if argument.rest else (remaining[:1], remaining[1:])
        where = f"{spec.name} {argument.name.upper()}"
        arguments[argument.name] = (
            [convert(argument.kind, word, display_unit, where) for word in taken]
            if argument.each
            else convert(argument.kind, " ".join(taken), display_unit, where)
        )
    if remaining:
        raise CommandError(f"{spec.name}: unexpected {remaining[0]!r}; usage: {spec.usage}")
    return arguments


def _count(text: str) -> int:
    value = int(text.replace("_", ""))
    if value < 0:
        raise ValueError("must not be negative")
    return value


def _seconds(text: str) -> float:
    value = float(text)
    if not value >= 0:
        raise ValueError("must be a non-negative number of seconds")
    return value


def _json(text: str) -> Any:
    if len(text) > JSON_CHARS_MAX:
        raise ValueError(f"longer than {JSON_CHARS_MAX} characters")
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"invalid JSON: {error.msg} at position {error.pos}") from None


def _setting(text: str) -> str:
    key, equals, _ = text.partition("=")
    if not equals or not key.strip():
        raise ValueError("expected key=value")
    return text


def parse_moment(text: str, display_unit: str = DISPLAY_UNIT_DEFAULT) -> Moment:
    """``#N`` is event N; anything else is a time (a bare number in ``display_unit``)."""
    if text.startswith("#"):
        return Moment(event=_count(text[1:]))
    t_ns = parse_time(text, display_unit)
    if t_ns < 0:
        raise ValueError("a time must not be negative")
    return Moment(t_ns=t_ns)


def _converters(display_unit: str) -> dict[str, Callable[[str], Any]]:
    return {
        "time": lambda text: parse_moment(text, display_unit),
        "count": _count,
        "int": lambda text: int(text.replace("_", "")),
        "seconds": _seconds,
        "path": lambda text: str(parse_path(text)),
        "predicate": lambda text: parse_predicate(text).text,
        "json": _json,
        "fault-spec": lambda text: parse_fault_spec(text, display_unit),
        "fault-edit": lambda text: parse_fault_edit(text, display_unit),
        "setting": _setting,
    }


def convert(kind: str, text: str, display_unit: str, where: str) -> Any:
    """Check and type one value; a bad value is a CommandError naming ``where``."""
    converter = _converters(display_unit).get(kind)
    if converter is None:
        if not text:
            raise CommandError(f"{where}: empty value")
        return text
    try:
        return converter(text)
    except (ValueError, TimeFormatError, PathError) as error:
        message = str(error).removeprefix("predicate: ")
        raise CommandError(f"{where}: {text!r}: {message}") from None


def argument_at(spec: CommandSpec, index: int) -> ArgumentSpec | None:
    """The positional argument that the ``index``-th positional word fills (rest absorbs the tail)."""
    for position, argument in enumerate(spec.arguments):
        if position == index or (argument.rest and index >= position):
            return argument
    return None


def option_named(spec: CommandSpec, name: str) -> OptionSpec | None:
    return spec.option(name)
