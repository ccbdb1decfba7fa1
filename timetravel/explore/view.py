"""The state at the cursor as rows and one-line values: what ``print`` and ``watch`` show.

``print`` walks the subtree under a path depth-first and gives one :class:`ValueEntry` per
value, to a bounded depth and count; containers are counted (``{4 keys}``, ``[12 items]``) and
arrays summarized by :func:`timetravel.explore.inspect_view.summarize_array` (dtype, shape,
min/max/mean, NaN and Inf counts, first values), the same summary ``timetravel inspect`` prints.
A ``watch`` is one line per path plus a digest of the exact value, so "changed" is decided by
the bits and not by the (lossy) summary text.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from timetravel.explore.array_diff import value_kind
from timetravel.explore.inspect_view import render, resolve, summarize_array
from timetravel.explore.paths import WORLD_PARTS, Path, parse_path, select, world_tree
from timetravel.explore.results import ValueEntry
from timetravel.fabric.fault_kinds import FAULT_KINDS, expected_outcome
from timetravel.sim.elided import ElidedArray, ElidedError
from timetravel.sim.encoding import digest
from timetravel.sim.world import World

PRINT_DEPTH_DEFAULT = 2
"""Levels under the printed path that ``print`` expands."""
PRINT_ENTRIES_MAX = 200
"""Rows one ``print`` shows; the rest are counted in ``omitted``."""
VALUE_TEXT_CHARS_MAX = 120
"""Characters of one value's summary (long strings and reprs are cut)."""
WATCH_TEXT_CHARS_MAX = 240
"""Characters of a watch's line (a wildcard watch lists its matches until this)."""
ABSENT = "<absent>"


def value_summary(value: Any) -> str:
    """One short line for any value (containers by size, arrays by their statistics)."""
    if isinstance(value, dict):
        return f"{{{len(value)} keys}}"
    if isinstance(value, (list, tuple)):
        return f"[{len(value)} items]"
    if isinstance(value, np.ndarray):
        text = render(summarize_array(value))[0]
    elif isinstance(value, ElidedArray):  # its statistics need its values: the caller rebuilds them
        raise ElidedError(f"the values of this {value!r} are rebuilt by re-execution")
    elif isinstance(value, bytes):
        text = f"<{len(value)} bytes>"
    elif isinstance(value, np.generic):
        text = repr(value.item())
    else:
        text = repr(value)
    return text if len(text) <= VALUE_TEXT_CHARS_MAX else text[: VALUE_TEXT_CHARS_MAX - 3] + "..."


def _children(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, dict):
        return [(str(key), item) for key, item in value.items()]
    if isinstance(value, (list, tuple)):
        return [(str(index), item) for index, item in enumerate(value)]
    return []


def _walk(path: str, value: Any, depth: int, levels: int) -> Iterator[ValueEntry]:
    """``value`` at ``path`` as an entry, then its children down to ``levels`` more levels."""
    yield ValueEntry(path, value_kind(value), value_summary(value), depth)
    if levels > 1:
        for key, item in _children(value):
            yield from _walk(f"{path}/{key}" if path else key, item, depth + 1, levels - 1)


def _count(value: Any, levels: int) -> int:
    """How many entries ``_walk`` would give for ``value``'s children within ``levels``."""
    children = _children(value)
    if levels <= 1:
        return len(children)
    return len(children) + sum(_count(item, levels - 1) for _, item in children)


def print_entries(
    world: World, path: str, depth: int = PRINT_DEPTH_DEFAULT, entries_max: int = PRINT_ENTRIES_MAX
) -> tuple[tuple[ValueEntry, ...], int]:
    """The rows under ``path`` (``depth`` levels, at most ``entries_max``) and how many were left out.

    A container's children are the rows (the path itself is the header); a leaf or an empty
    container is one row of its own; each match of a wildcard path is a row with its children
    under it. A path that names nothing raises PathError naming what exists there.
    """
    assert entries_max > 0
    depth = max(depth, 1)
    parsed = parse_path(path)
    value = resolve(world, path) if parsed.segments else world_tree(world)
    rows: Iterator[ValueEntry]
    if parsed.has_wildcard:
        roots = list(value.items())
        total = sum(1 + _count(item, depth - 1) for _, item in roots)
        rows = (entry for concrete, item in roots for entry in _walk(concrete, item, 0, depth))
    elif _children(value):
        total = _count(value, depth)
        base = str(parsed)
        rows = (
            entry
            for key, item in _children(value)
            for entry in _walk(f"{base}/{key}" if base else key, item, 0, depth)
        )
    else:
        total = 1
        rows = iter([ValueEntry(str(parsed), value_kind(value), value_summary(value), 0)])
    shown: list[ValueEntry] = []
    for entry in rows:
        if len(shown) == entries_max:
            break
        shown.append(entry)
    assert total >= len(shown)
    return tuple(shown), total - len(shown)


def _tree_for(world: World, parsed: Path) -> dict[str, Any]:
    """The world tree, built only as far as the path needs (the queue is sorted only when asked)."""
    first = parsed.segments[0] if parsed.segments else "*"
    if first in WORLD_PARTS and first != "queue":
        return {first: getattr(world, first)}
    return world_tree(world)


def watch_matches(world: World, path: str) -> list[tuple[str, Any]]:
    """Every (concrete path, value) a watched path names now (empty when it names nothing yet)."""
    parsed = parse_path(path)
    return select(_tree_for(world, parsed), parsed)


def watch_digest(world: World, path: str) -> bytes:
    """A digest of the exact values a watched path names (what a change is decided by)."""
    return digest(
        [
            [concrete, value.item() if isinstance(value, np.generic) else value]
            for concrete, value in watch_matches(world, path)
        ]
    )


def watch_text(world: World, path: str) -> str:
    """One line: the value (or ``<absent>``); a wildcard lists ``match=value`` pairs and a
    container its ``key=value`` pairs (each value summarized, the line cut at WATCH_TEXT_CHARS_MAX)."""
    parsed = parse_path(path)
    matches = watch_matches(world, path)
    if not matches:
        return ABSENT
    if parsed.has_wildcard:
        pairs = [(concrete, value_summary(value)) for concrete, value in matches]
    elif _children(matches[0][1]):
        pairs = [(key, value_summary(item)) for key, item in _children(matches[0][1])]
    else:
        return value_summary(matches[0][1])
    text = "  ".join(f"{name}={summary}" for name, summary in pairs)
    if len(text) <= WATCH_TEXT_CHARS_MAX:
        return text
    return text[: WATCH_TEXT_CHARS_MAX - 20].rstrip() + f" ... ({len(pairs)} in all)"


def fault_schedule(world: World) -> tuple[dict[str, Any], ...]:
    """The fault records in the world, each with ``hits`` (times it acted so far) and, for the
    fabric's kinds, the ``expected`` outcome for a correct system (as ``timetravel faults`` shows)."""
    hits = world.fabric.get("fault_hits", {}) if isinstance(world.fabric, dict) else {}
    restartable = bool(world.fabric.get("restartable")) if isinstance(world.fabric, dict) else False
    records = []
    for fault in world.faults:
        record = dict(fault)
        record["hits"] = hits.get(fault.get("id"), 0) if isinstance(hits, dict) else 0
        if fault.get("kind") in FAULT_KINDS:
            record["expected"] = expected_outcome(fault, restartable)
        records.append(record)
    return tuple(records)
