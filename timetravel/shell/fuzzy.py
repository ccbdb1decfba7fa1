"""Fuzzy matching for completion: the typed characters in order, anywhere in the candidate.

Typing ``fd`` offers ``find-first`` and ``--drop-fault``; typing ``r3`` under ``nodes/`` offers
``rank3`` and ``rank13``. The ranking is what a user expects from fzf-like tools: a candidate that
starts with the typed text comes first, then the one whose match starts earliest, then the one
whose match is tightest; ties keep the source's order (times stay chronological, branches in
creation order, file names sorted). Case is ignored.

This module is plain Python (no prompt_toolkit), so the ranking is tested on its own and shared by
every completion kind. prompt_toolkit's own ``FuzzyCompleter`` is not used because it hides the
text before the partial word from the wrapped completer, and a state path's completion needs
exactly that text (``nodes/*/`` decides which keys are offered).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

CANDIDATES_MAX = 200
"""Bound on the completions offered at once (a 10,000-rank world has 10,000 node names)."""


@dataclass(frozen=True)
class FuzzyMatch:
    """A candidate that matched, and the indexes of its characters that matched (for highlighting)."""

    text: str
    positions: tuple[int, ...]
    rank: tuple[int, int, int, int]


def match(typed: str, candidate: str) -> tuple[int, ...] | None:
    """The positions in ``candidate`` of the characters of ``typed``, in order; None when absent.

    Among the placements, the one that starts earliest and then spans the fewest characters is
    chosen: for each possible start, a greedy left-to-right scan gives the tightest span.
    """
    if not typed:
        return ()
    lowered, wanted = candidate.lower(), typed.lower()
    best: tuple[int, ...] | None = None
    start = lowered.find(wanted[0])
    while start != -1:
        positions = _greedy(lowered, wanted, start)
        if positions is None:
            break
        if best is None or positions[-1] - positions[0] < best[-1] - best[0]:
            best = positions
        start = lowered.find(wanted[0], start + 1)
    return best


def _greedy(lowered: str, wanted: str, start: int) -> tuple[int, ...] | None:
    positions = [start]
    cursor = start + 1
    for character in wanted[1:]:
        found = lowered.find(character, cursor)
        if found == -1:
            return None
        positions.append(found)
        cursor = found + 1
    return tuple(positions)


def rank(typed: str, candidates: Sequence[str], limit: int = CANDIDATES_MAX) -> list[FuzzyMatch]:
    """The candidates that match ``typed``, best first, at most ``limit`` of them.

    Nothing typed yet keeps the source's order (times chronological, options as the spec lists them).
    """
    if not typed:
        return [
            FuzzyMatch(candidate, (), (0, 0, 0, order)) for order, candidate in enumerate(candidates[:limit])
        ]
    matches: list[FuzzyMatch] = []
    for order, candidate in enumerate(candidates):
        positions = match(typed, candidate)
        if positions is None:
            continue
        is_prefix = candidate.lower().startswith(typed.lower())
        first = positions[0] if positions else 0
        span = positions[-1] - positions[0] if positions else 0
        matches.append(FuzzyMatch(candidate, positions, (0 if is_prefix else 1, first, span, order)))
    matches.sort(key=lambda found: found.rank)
    return matches[:limit]
