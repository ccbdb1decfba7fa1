"""What to offer at the cursor: which slot of which command it is in, and the candidates there.

The command language's specs are data: every argument and option carries a **kind** (``time``,
``node``, ``path``, ``branch``, ``fault``, ``setting``, ``command``, ``file``, ...). Completion
reads the half-typed line with the same rules as the parser, finds the slot the cursor is in —
the command name, an option name, an option's value, or a positional argument — and asks a
:class:`CompletionSource` for that kind's candidates: the open recording's snapshot and failure
times, node names, the world's state tree, branches, faults and config keys. Then
:mod:`timetravel.shell.fuzzy` ranks them against the partial word.

No prompt_toolkit here: :mod:`timetravel.shell.completer` adapts the answer to prompt_toolkit's
``Completer``, and the TUI's command line could use this module as it is.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from timetravel.shell.fuzzy import CANDIDATES_MAX, rank
from timetravel.shell.words import LineState, line_state, quote_word

FILE_ENTRIES_MAX = 500
"""Bound on the directory entries read to complete a file name."""
PREDICATE_OPENERS = "(!<>=, "
"""Characters after which a predicate's next token (a path or a function) starts."""


# -- what the command language exposes (matched structurally, so the shell names no spec class) --


class ArgumentLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def help(self) -> str: ...
    @property
    def required(self) -> bool: ...
    @property
    def rest(self) -> bool: ...


class OptionLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str | None: ...
    @property
    def help(self) -> str: ...
    @property
    def repeat(self) -> bool: ...


class CommandLike(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def summary(self) -> str: ...
    @property
    def arguments(self) -> Sequence[ArgumentLike]: ...
    @property
    def options(self) -> Sequence[OptionLike]: ...
    @property
    def usage(self) -> str: ...


@dataclass(frozen=True)
class Vocabulary:
    """The commands a front end offers (by name), their aliases, and the predicate functions."""

    commands: Mapping[str, CommandLike]
    aliases: Mapping[str, str] = field(default_factory=dict)
    predicate_functions: Sequence[str] = ()

    def resolve(self, name: str) -> CommandLike | None:
        return self.commands.get(self.aliases.get(name, name))


# -- what the open recording offers ------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """One completion: the text to insert and a short note shown beside it."""

    text: str
    meta: str = ""


class CompletionSource(Protocol):
    """The open recording's names, for the kinds that depend on it."""

    def times(self) -> Sequence[Candidate]:
        """Snapshot times, failure times, the cursor and the end (in the display unit)."""
        ...

    def nodes(self) -> Sequence[Candidate]: ...

    def branches(self) -> Sequence[Candidate]: ...

    def faults(self) -> Sequence[Candidate]:
        """The fault ids of the cursor's branch (``f3``), each with its kind and target."""
        ...

    def settings(self) -> Sequence[Candidate]:
        """``key=`` for each config key (and ``key=value`` for keys with fixed choices)."""
        ...

    def paths(self, prefix: str) -> Sequence[str]:
        """State paths that extend ``prefix``'s directory by one segment (``nodes/rank3``)."""
        ...


class EmptySource:
    """A source with nothing open: only the command language itself completes."""

    def times(self) -> Sequence[Candidate]:
        return ()

    def nodes(self) -> Sequence[Candidate]:
        return ()

    def branches(self) -> Sequence[Candidate]:
        return ()

    def faults(self) -> Sequence[Candidate]:
        return ()

    def settings(self) -> Sequence[Candidate]:
        return ()

    def paths(self, prefix: str) -> Sequence[str]:
        return ()


# -- where the cursor is -----------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """The slot the cursor is in: a kind to complete, and for which command."""

    kind: str
    """``command``, ``option``, an argument kind (``time``, ``path``...) or ``none``."""
    command: CommandLike | None = None
    help: str = ""
    options_too: bool = False
    """Also offer the command's options (the argument here is optional, or none is left)."""


def find_slot(words: Sequence[str], partial: str, vocabulary: Vocabulary) -> Slot:
    """The slot for ``partial`` after the finished ``words`` of one command."""
    if not words:
        return Slot("command", help="a command (help lists them)")
    command = vocabulary.resolve(words[0])
    if command is None:
        return Slot("none")
    positional = 0
    rest_started = False
    index = 1
    while index < len(words):
        word = words[index]
        if word.startswith("--") and len(word) > 2 and not rest_started:
            option = _option(command, word.partition("=")[0])
            takes_value = option is not None and option.kind is not None and "=" not in word
            if takes_value and index + 1 == len(words):
                assert option is not None and option.kind is not None
                return Slot(option.kind, command, f"{option.name}: {option.help}")
            index += 2 if takes_value else 1
            continue
        positional += 1
        rest_started = any(argument.rest for argument in command.arguments)
        index += 1
    if partial.startswith("-") and not rest_started:
        name, equals, _ = partial.partition("=")
        option = _option(command, name)
        if equals and option is not None and option.kind is not None:
            return Slot(option.kind, command, f"{option.name}: {option.help}")
        return Slot("option", command, command.usage)
    argument = _argument_at(command, positional)
    if argument is None:
        return Slot("option", command, command.usage)
    return Slot(
        argument.kind, command, f"{argument.name.upper()}: {argument.help}", options_too=not argument.required
    )


def _option(command: CommandLike, name: str) -> OptionLike | None:
    for option in command.options:
        if option.name == name:
            return option
    return None


def _argument_at(command: CommandLike, index: int) -> ArgumentLike | None:
    for position, argument in enumerate(command.arguments):
        if position == index or (argument.rest and index >= position):
            return argument
    return None


# -- the completions ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Completion:
    """A completion as any front end needs it: replace ``replace_length`` typed characters by ``text``."""

    text: str
    replace_length: int
    display: str
    positions: tuple[int, ...]
    """Indexes in ``display`` of the characters that matched what was typed (for highlighting)."""
    meta: str = ""


def complete(
    text_before_cursor: str, vocabulary: Vocabulary, source: CompletionSource, limit: int = CANDIDATES_MAX
) -> list[Completion]:
    """The completions for the line up to the cursor, best first."""
    state = line_state(text_before_cursor)
    slot = find_slot(state.words, state.partial, vocabulary)
    head = ""
    if state.partial.startswith("--") and "=" in state.partial and slot.kind != "option":
        head = state.partial.partition("=")[0] + "="
    if slot.kind == "path":
        return _complete_path(state, source, limit, head)
    if slot.kind == "predicate":
        return _complete_predicate(state, vocabulary, source, limit)
    if slot.kind == "file":
        return _complete_file(state, limit, head)
    return _ranked(state.partial[len(head) :], _candidates(slot, vocabulary, source), state, limit, head)


def _candidates(slot: Slot, vocabulary: Vocabulary, source: CompletionSource) -> list[Candidate]:
    found: list[Candidate] = []
    if slot.kind == "command":
        found = [Candidate(name, spec.summary) for name, spec in vocabulary.commands.items()]
    elif slot.kind == "option" and slot.command is not None:
        found = _option_candidates(slot.command)
    elif slot.kind == "time":
        found = list(source.times())
    elif slot.kind == "node":
        found = list(source.nodes())
    elif slot.kind == "branch":
        found = list(source.branches())
    elif slot.kind == "fault":
        found = list(source.faults())
    elif slot.kind == "setting":
        found = list(source.settings())
    if slot.options_too and slot.command is not None:
        found.extend(_option_candidates(slot.command))
    return found


def _option_candidates(command: CommandLike) -> list[Candidate]:
    return [
        Candidate(
            option.name, option.help if option.kind is None else f"{option.kind.upper()}: {option.help}"
        )
        for option in command.options
    ]


def _ranked(
    typed: str, candidates: Sequence[Candidate], state: LineState, limit: int, head: str = ""
) -> list[Completion]:
    meta = {candidate.text: candidate.meta for candidate in reversed(candidates)}
    names = list(dict.fromkeys(candidate.text for candidate in candidates))
    return [
        Completion(
            quote_word(head + found.text),
            state.partial_raw_length,
            found.text,
            found.positions,
            meta[found.text],
        )
        for found in rank(typed, names, limit)
    ]


def _complete_path(
    state: LineState, source: CompletionSource, limit: int, head: str = ""
) -> list[Completion]:
    """Paths one segment deeper than the typed directory; only the last segment is matched fuzzily."""
    typed = state.partial[len(head) :]
    directory, slash, last = typed.rpartition("/")
    candidates = [path for path in source.paths(typed) if path.rpartition("/")[0] == directory]
    offset = len(head) + len(directory) + len(slash)
    completions = []
    for found in rank(last, [path.rpartition("/")[2] for path in candidates], limit):
        full = f"{head}{directory}{slash}{found.text}"
        positions = tuple(offset + position for position in found.positions)
        completions.append(Completion(quote_word(full), state.partial_raw_length, full, positions))
    return completions


def _complete_predicate(
    state: LineState, vocabulary: Vocabulary, source: CompletionSource, limit: int
) -> list[Completion]:
    """A predicate's last token: a function name (with its ``(``) or a state path."""
    cut = max(state.partial.rfind(character) for character in PREDICATE_OPENERS) + 1
    head, token = state.partial[:cut], state.partial[cut:]
    paths = _complete_path(state, source, limit, head)
    if "/" in token:
        return paths
    functions = [f"{name}(" for name in vocabulary.predicate_functions]
    completions = []
    for found in rank(token, functions, limit):
        text = head + found.text
        positions = tuple(len(head) + position for position in found.positions)
        completions.append(
            Completion(quote_word(text), state.partial_raw_length, text, positions, "function")
        )
    return (completions + paths)[:limit]


def _complete_file(state: LineState, limit: int, head: str = "") -> list[Completion]:
    """Entries of the typed directory (bounded, sorted); a directory gets a trailing ``/``."""
    directory, slash, last = state.partial[len(head) :].rpartition("/")
    folder = (directory or "/") if slash else "."
    names: list[str] = []
    try:
        with os.scandir(os.path.expanduser(folder)) as entries:
            for count, entry in enumerate(entries):
                if count >= FILE_ENTRIES_MAX:
                    break
                if not entry.name.startswith(".") or last.startswith("."):
                    names.append(entry.name + ("/" if entry.is_dir() else ""))
    except OSError:
        return []
    prefix = f"{head}{directory}{slash}"
    return [
        Completion(
            quote_word(prefix + found.text),
            state.partial_raw_length,
            prefix + found.text,
            tuple(len(prefix) + position for position in found.positions),
        )
        for found in rank(last, sorted(names), limit)
    ]
