"""What to offer at the cursor: which slot of which command it is in, and the candidates there.

The command language's specs are data: every argument and option carries a **kind** (``time``,
``node``, ``path``, ``predicate``, ``branch``, ``fault``, ``setting``, ``command``, ``file``...).
Completion reads the half-typed line with the parser's quoting rules (tolerating an open quote),
finds the slot the cursor is in — the command name, an option name, an option's value or a
positional argument — and gathers that kind's candidates: command and option names from the
specs, predicate functions from the predicate language, file names from the file system, and
everything that depends on the open recording (snapshot and failure times, nodes, state paths,
branches, faults, config keys) from the language's ``ValueSource`` — the same source the TUI's
command line asks. Then :mod:`timetravel.shell.fuzzy` ranks them against the partial word.

Why not the language's own ``completion_context``: the shell adds commands of its own (``plot``,
``quit``) that the language's table does not hold, and completes fuzzily, which needs every value
of a kind rather than those with the typed prefix. No prompt_toolkit here:
:mod:`timetravel.shell.completer` adapts the answer to prompt_toolkit's ``Completer``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from timetravel.explore.commands import COMMANDS, CommandSpec, OptionSpec, ValueSource
from timetravel.explore.commands.parse import argument_at
from timetravel.explore.commands.spec import ALIASES
from timetravel.explore.predicates import NUMBER_FUNCTIONS, TRUTH_FUNCTIONS
from timetravel.shell.fuzzy import CANDIDATES_MAX, rank
from timetravel.shell.words import LineState, line_state, quote_word

FILE_ENTRIES_MAX = 500
"""Bound on the directory entries read to complete a file name."""
PREDICATE_OPENERS = "(!<>=, "
"""Characters after which a predicate's next token (a path or a function) starts."""


# -- the commands and the recording's names --------------------------------------------------


@dataclass(frozen=True)
class Vocabulary:
    """The commands a front end offers (the shared language's, plus its own), aliases, predicate functions."""

    commands: Mapping[str, CommandSpec]
    aliases: Mapping[str, str] = field(default_factory=dict)
    predicate_functions: Sequence[str] = ()
    option_kinds: Mapping[tuple[str, str], str] = field(default_factory=dict)
    """(command, option) -> the kind to complete there, where a front end knows more than the
    spec's kind (the shell's ``plot --metric`` is a ``word`` to the parser, a metric name here)."""

    def resolve(self, name: str) -> CommandSpec | None:
        return self.commands.get(self.aliases.get(name, name))

    def value_kind(self, command: CommandSpec, option: OptionSpec) -> str:
        """What to complete as ``option``'s value."""
        return self.option_kinds.get((command.name, option.name), option.kind or "word")


def language_vocabulary(
    extra: Sequence[CommandSpec] = (), option_kinds: Mapping[tuple[str, str], str] | None = None
) -> Vocabulary:
    """The command language's commands and predicate functions, plus a front end's ``extra`` commands
    (and the completion kinds of their options, see :attr:`Vocabulary.option_kinds`)."""
    commands: dict[str, CommandSpec] = dict(COMMANDS)
    aliases: dict[str, str] = dict(ALIASES)
    for spec in extra:
        assert spec.name not in commands, f"{spec.name} is already a command of the language"
        commands[spec.name] = spec
        aliases.update((alias, spec.name) for alias in spec.aliases)
    return Vocabulary(commands, aliases, (*TRUTH_FUNCTIONS, *NUMBER_FUNCTIONS), dict(option_kinds or {}))


@dataclass(frozen=True)
class Candidate:
    """One completion: the text to insert and a short note shown beside it."""

    text: str
    meta: str = ""


RECORDING_KINDS = ("time", "node", "branch", "fault", "setting", "metric")
"""Kinds whose names come from the open recording through the language's ``ValueSource``
(``metric`` is the shell's: see :attr:`Vocabulary.option_kinds`)."""


class NotedValueSource(ValueSource, Protocol):
    """A ``ValueSource`` that also says a word about each value (a branch's outcome, a time's snapshot)."""

    def notes(self, kind: str) -> Mapping[str, str]: ...


class EmptySource:
    """A source with nothing open: only the command language itself completes."""

    def values(self, kind: str, prefix: str) -> list[str]:
        return []


def _source_candidates(source: ValueSource, kind: str, typed: str = "") -> list[Candidate]:
    """The values of ``kind`` for fuzzy matching: every value (asked with an empty prefix), and
    those that start with what is typed — a source returns a bounded number of values, so on a
    world of 10,000 ranks ``rank7`` would otherwise miss ``rank7000``."""
    notes_of = getattr(source, "notes", None)
    notes: Mapping[str, str] = notes_of(kind) if callable(notes_of) else {}
    values = _union(source.values(kind, typed), source.values(kind, "")) if typed else source.values(kind, "")
    return [Candidate(value, notes.get(value, "")) for value in values]


def _union(first: Sequence[str], then: Sequence[str]) -> list[str]:
    return list(dict.fromkeys([*first, *then]))


# -- where the cursor is -----------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """The slot the cursor is in: a kind to complete, and for which command."""

    kind: str
    """``command``, ``option``, an argument kind (``time``, ``path``...) or ``none``."""
    command: CommandSpec | None = None
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
                return Slot(vocabulary.value_kind(command, option), command, f"{option.name}: {option.help}")
            index += 2 if takes_value else 1
            continue
        positional += 1
        rest_started = any(argument.rest for argument in command.arguments)
        index += 1
    if partial.startswith("-") and not rest_started:
        name, equals, _ = partial.partition("=")
        option = _option(command, name)
        if equals and option is not None and option.kind is not None:
            return Slot(vocabulary.value_kind(command, option), command, f"{option.name}: {option.help}")
        return Slot("option", command, command.usage)
    argument = argument_at(command, positional)
    if argument is None:
        return Slot("option", command, command.usage)
    return Slot(
        argument.kind, command, f"{argument.name.upper()}: {argument.help}", options_too=not argument.required
    )


def _option(command: CommandSpec, name: str) -> OptionSpec | None:
    return command.option(name)


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
    text_before_cursor: str, vocabulary: Vocabulary, source: ValueSource, limit: int = CANDIDATES_MAX
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
    typed = state.partial[len(head) :]
    return _ranked(typed, _candidates(slot, vocabulary, source, typed), state, limit, head)


def _candidates(slot: Slot, vocabulary: Vocabulary, source: ValueSource, typed: str = "") -> list[Candidate]:
    found: list[Candidate] = []
    if slot.kind == "command":
        found = [Candidate(name, spec.summary) for name, spec in vocabulary.commands.items()]
    elif slot.kind == "option" and slot.command is not None:
        found = _option_candidates(slot.command)
    elif slot.kind in RECORDING_KINDS:
        found = _source_candidates(source, slot.kind, typed)
    if slot.options_too and slot.command is not None:
        found.extend(_option_candidates(slot.command))
    return found


def _option_candidates(command: CommandSpec) -> list[Candidate]:
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


def _complete_path(state: LineState, source: ValueSource, limit: int, head: str = "") -> list[Completion]:
    """Paths one segment deeper than the typed directory; only the last segment is matched fuzzily."""
    typed = state.partial[len(head) :]
    directory, slash, last = typed.rpartition("/")
    asked = f"{directory}{slash}"
    listed = (
        _union(source.values("path", typed), source.values("path", asked))
        if last
        else source.values("path", asked)
    )
    candidates = [path for path in listed if path.rpartition("/")[0] == directory]
    offset = len(head) + len(directory) + len(slash)
    completions = []
    for found in rank(last, [path.rpartition("/")[2] for path in candidates], limit):
        full = f"{head}{directory}{slash}{found.text}"
        positions = tuple(offset + position for position in found.positions)
        completions.append(Completion(quote_word(full), state.partial_raw_length, full, positions))
    return completions


def _complete_predicate(
    state: LineState, vocabulary: Vocabulary, source: ValueSource, limit: int
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
