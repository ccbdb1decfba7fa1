"""Completion for the command line: command names, then each argument by what it is.

A command's :class:`~timetravel.tui.model.CommandSpec` says what its positional arguments are
(``time``, ``node``, ``branch``, ``path``, ``fault``, ``kind``) and what each option takes
(``--drop-fault`` takes a fault id); the :class:`~timetravel.tui.model.CompletionContext` holds
the names in the open recording. Completions are whole lines, so the command line can show the
first as ghost text and cycle through the rest with tab. Paths complete one segment at a time.
Pure functions, no textual.
"""

from __future__ import annotations

from collections.abc import Sequence

from timetravel.tui.model import CommandSpec, CompletionContext

CANDIDATES_MAX = 200


def _names(kind: str, context: CompletionContext) -> Sequence[str]:
    return {
        "time": context.times,
        "node": context.nodes,
        "branch": context.branches,
        "fault": context.faults,
        "kind": context.kinds,
        "path": context.paths,
    }.get(kind, ())


def _path_candidates(prefix: str, paths: Sequence[str]) -> list[str]:
    """Complete one more segment of a slash path (``nodes/ra`` -> ``nodes/rank0/``...)."""
    depth = prefix.count("/")
    found: list[str] = []
    for path in paths:
        if not path.startswith(prefix):
            continue
        parts = path.split("/")
        candidate = "/".join(parts[: depth + 1]) + ("/" if len(parts) > depth + 1 else "")
        if candidate not in found:
            found.append(candidate)
    return found


def _argument_kind(spec: CommandSpec, words: Sequence[str]) -> str | None:
    """The kind of the word being typed, given the words before it (options and their values)."""
    if words and words[-1] in spec.options:
        return spec.options[words[-1]]
    position = 0
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word.startswith("--"):
            skip = word in spec.options and spec.options[word] != "flag"
        else:
            position += 1
    return spec.arguments[position] if position < len(spec.arguments) else None


def complete(text: str, specs: Sequence[CommandSpec], context: CompletionContext) -> list[str]:
    """Whole-line completions of ``text`` (the command line's value), best first."""
    words = text.split(" ")
    current = words[-1]
    before = [word for word in words[:-1] if word]
    head = text[: len(text) - len(current)]
    if not before:
        return [spec.name + " " for spec in specs if spec.name.startswith(current)][:CANDIDATES_MAX]
    spec = next((spec for spec in specs if spec.name == before[0]), None)
    if spec is None:
        return []
    if current.startswith("-"):
        options = [option for option in spec.options if option.startswith(current)]
        return [head + option + " " for option in options][:CANDIDATES_MAX]
    kind = _argument_kind(spec, before[1:])
    if kind is None:
        return []
    names = _names(kind, context)
    if kind == "path":
        return [head + candidate for candidate in _path_candidates(current, names)][:CANDIDATES_MAX]
    return [head + name + " " for name in names if name.startswith(current)][:CANDIDATES_MAX]
