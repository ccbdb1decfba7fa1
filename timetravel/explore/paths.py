"""State paths over a World's plain data.

A **path** names a subtree of the world: segments separated by ``/`` (``nodes/rank3/weights``,
``metrics/loss/0``, ``faults/2/params``). A segment ``*`` matches every key of a dict or every
index of a list at that level, so ``nodes/*/weights`` names the weights of every node that has
them. The world is seen through :func:`world_tree`: its public parts as one dict (the kernel's
bookkeeping, such as the open hash-chain batch, is left out).

Predicates over paths (``nonfinite(nodes/*/weights)``) are in :mod:`timetravel.explore.predicates`.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from timetravel.explore.diff import diff as structural_diff
from timetravel.sim.elided import ElidedArray, ElidedError, summary_of
from timetravel.sim.encoding import array_digest

if TYPE_CHECKING:
    from timetravel.sim.world import World

WILDCARD = "*"
PATH_CHARS_MAX = 512
PATH_SEGMENTS_MAX = 32
MATCHES_MAX = 100_000
"""Bound on the values one wildcard path may select (a 10,000-rank world has 10,000 nodes)."""
COMPLETION_PARENTS_MAX = 8
"""Under a wildcard, completion offers the keys of this many matched parents."""

_SEGMENT = re.compile(r"^[A-Za-z0-9_.:\-*]+$")
WORLD_PARTS = (
    "scenario",
    "seed",
    "branch_key",
    "config",
    "t_ns",
    "seq",
    "events_processed",
    "nodes",
    "roles",
    "down",
    "choices",
    "fabric",
    "faults",
    "failures",
    "metrics",
    "log",
    "queue",
)


class PathError(ValueError):
    """A path or predicate that cannot be read; the message names the text and the problem."""


# -- paths --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Path:
    """A parsed path: its segments, each a key, an index or ``*``."""

    segments: tuple[str, ...]

    @property
    def has_wildcard(self) -> bool:
        return WILDCARD in self.segments

    def __str__(self) -> str:
        return "/".join(self.segments)


def parse_path(text: str) -> Path:
    """Read a path such as ``nodes/*/weights``; an empty text or ``/`` names the whole tree."""
    if len(text) > PATH_CHARS_MAX:
        raise PathError(f"path longer than {PATH_CHARS_MAX} characters")
    stripped = text.strip().strip("/")
    if not stripped:
        return Path(())
    segments = tuple(stripped.split("/"))
    if len(segments) > PATH_SEGMENTS_MAX:
        raise PathError(f"path {text!r} has more than {PATH_SEGMENTS_MAX} segments")
    for segment in segments:
        if not _SEGMENT.match(segment) or (WILDCARD in segment and segment != WILDCARD):
            raise PathError(
                f"path {text!r}: segment {segment!r} is not a key, an index or '*' "
                "(letters, digits, _ . : - only)"
            )
    return Path(segments)


def world_tree(world: World) -> dict[str, Any]:
    """The world's public parts as one dict: the tree that paths, predicates and diffs walk.

    Pending events are listed in the order they will run, each as a dict, so a path such as
    ``queue/0/kind`` reads naturally.
    """
    tree: dict[str, Any] = {name: getattr(world, name) for name in WORLD_PARTS}
    tree["queue"] = [
        {"t_ns": event[0], "seq": event[1], "dst": event[2], "kind": event[3], "payload": event[4]}
        for event in sorted(world.queue)
    ]
    return tree


def _children(value: Any) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        yield from ((str(key), item) for key, item in value.items())
    elif isinstance(value, (list, tuple)):
        yield from ((str(index), item) for index, item in enumerate(value))


def _child(value: Any, segment: str) -> tuple[bool, Any]:
    if isinstance(value, dict):
        return (True, value[segment]) if segment in value else (False, None)
    if isinstance(value, (list, tuple)) and segment.lstrip("-").isdigit():
        index = int(segment)
        if -len(value) <= index < len(value):
            return True, value[index]
    if isinstance(value, (list, tuple)):
        # a record list by id (``faults/f2``), as the diff names such records
        for item in value:
            if isinstance(item, dict) and item.get("id") == segment:
                return True, item
    if isinstance(value, np.ndarray) and value.ndim >= 1 and segment.lstrip("-").isdigit():
        index = int(segment)
        if -value.shape[0] <= index < value.shape[0]:
            return True, value[index]
    return False, None


def select(tree: Any, path: Path | str) -> list[tuple[str, Any]]:
    """Every (concrete path, value) that ``path`` names in ``tree``, in walk order.

    A wildcard visits dict keys in their order and list items by index, so the result is stable.
    More than MATCHES_MAX matches is an error rather than a slow surprise.
    """
    parsed = parse_path(path) if isinstance(path, str) else path
    found: list[tuple[str, Any]] = []
    _select(tree, parsed.segments, (), found)
    return found


def _select(value: Any, rest: tuple[str, ...], prefix: tuple[str, ...], found: list[tuple[str, Any]]) -> None:
    if not rest:
        if len(found) >= MATCHES_MAX:
            raise PathError(f"path selects more than {MATCHES_MAX} values; narrow it")
        found.append(("/".join(prefix), value))
        return
    segment, tail = rest[0], rest[1:]
    if segment == WILDCARD:
        for key, item in _children(value):
            _select(item, tail, (*prefix, key), found)
        return
    present, item = _child(value, segment)
    if present:
        _select(item, tail, (*prefix, segment), found)


def get(tree: Any, path: Path | str) -> Any:
    """The one value a path without wildcards names; PathError when it names nothing."""
    parsed = parse_path(path) if isinstance(path, str) else path
    if parsed.has_wildcard:
        raise PathError(f"path {parsed} has a wildcard; use select()")
    matches = select(tree, parsed)
    if not matches:
        raise PathError(f"path {parsed} names nothing here")
    return matches[0][1]


def completions(tree: Any, prefix: str, limit: int = 50) -> list[str]:
    """Paths that extend ``prefix`` by one segment (for the shell's and the TUI's completion)."""
    head, _, partial = prefix.rpartition("/")
    try:
        parents = select(tree, parse_path(head)) if head else [("", tree)]
    except PathError:
        return []
    names: list[str] = []
    for _, parent in parents[:COMPLETION_PARENTS_MAX]:
        for key, _ in _children(parent):
            candidate = f"{head}/{key}" if head else key
            if key.startswith(partial) and candidate not in names:
                names.append(candidate)
                if len(names) >= limit:
                    return names
    return names


# -- values -------------------------------------------------------------------------------------


def is_nonfinite(value: Any) -> bool:
    """True when a float, an array or anything nested in a container holds a NaN or an Inf."""
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, ElidedArray):
        return summary_of(value)[1] > 0  # its summary, or ElidedError: rebuilt by re-execution
    if isinstance(value, np.ndarray):
        if value.dtype.kind in "biuSUV" and value.dtype.name != "bfloat16":
            return False
        return bool(not np.all(np.isfinite(value)))
    if isinstance(value, np.generic):
        return is_nonfinite(value.item())
    if isinstance(value, (dict, list, tuple)):
        return any(is_nonfinite(item) for _, item in _children(value))
    return False


def numbers(value: Any) -> Iterator[float]:
    """Every number under ``value`` (arrays element by element, as float)."""
    if isinstance(value, (bool, int, float)):
        yield float(value)
    elif isinstance(value, ElidedArray):
        raise ElidedError(f"the values of this {value!r} are rebuilt by re-execution")
    elif isinstance(value, np.ndarray):
        if value.dtype.kind in "biuf" or value.dtype.name == "bfloat16":
            yield from value.astype(np.float64).reshape(-1).tolist()
    elif isinstance(value, np.generic):
        yield from numbers(value.item())
    elif isinstance(value, (dict, list, tuple)):
        for _, item in _children(value):
            yield from numbers(item)


def values_equal(a: Any, b: Any) -> bool:
    """Bitwise structural equality (the rule of the diff: NaN equals NaN, 0.0 differs from -0.0).

    Two arrays of one dtype and shape compare by their bytes, which is that rule, without the
    diff's per-element summary: ``differ(nodes/*/weights)`` evaluated after every event of a scan
    compares every replica with the first one each time."""
    if type(a) is np.ndarray and type(b) is np.ndarray and a.dtype == b.dtype and a.shape == b.shape:
        return a.tobytes() == b.tobytes()
    if isinstance(a, ElidedArray) or isinstance(b, ElidedArray):  # the same bits, the same digest
        return _array_digest(a) == _array_digest(b)
    return structural_diff(a, b, changes_max=0).equal


def _array_digest(value: Any) -> bytes | None:
    if isinstance(value, ElidedArray):
        return value.digest
    return array_digest(value) if isinstance(value, np.ndarray) else None
