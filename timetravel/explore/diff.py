"""Typed structural diff of plain data: what differs between two worlds, as a tree of paths.

Two worlds (or any two plain-data values) are walked side by side: dicts by key (the keys of
``a`` in their order, then the keys only in ``b``), lists and tuples by index, numpy arrays
summarized rather than listed. The result is a flat list of :class:`Change` records in the order
of that walk, each named by its path (``nodes/rank3/weights``), which front ends render as a
tree. The walk is deterministic (it never iterates a set or relies on hashing), so the same two
values always give the same diff.

Equality is *bitwise*: the product promises bit-identical replays, so ``0.0`` and ``-0.0``
differ and two NaNs with the same bits are equal. An array change carries what a person
debugging numerics asks first: how many elements differ, the largest absolute and ULP
difference, the first differing index, and the NaN/Inf counts on each side.

Lists are matched by what their items *are*, not by position, where the items say so: a list of
records that each carry a unique ``id`` (the fault schedule: ``f1``, ``f2``, ...) is matched by id,
so that dropping ``f2`` is one line (``faults/f2: removed``) rather than every later record shifting
by one; a list of pending events (dicts of ``t_ns``, ``dst``, ``kind``, ``payload``) is matched as a
multiset by identity — time, kind, destination and payload digest — so an event that is in both
queues is never reported, whatever its position. A scalar under a time key (``t_start``,
``*_ns``) is shown as a time as well as a count of nanoseconds.

An array change names the elements that differ (index, old and new value, the bits that differ),
up to ``ELEMENTS_SHOWN``, because the first question about a flipped bit is *which one*
(:mod:`timetravel.explore.array_diff`).

Output is bounded (``changes_max``); the walk still counts what it did not keep, so a user sees
"and 9,800 more" instead of a flood, and a diff of two 10,000-rank worlds stays readable.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from timetravel.explore.array_diff import (
    ELEMENTS_SHOWN,
    array_summary_text,
    differing_elements,
    element_bits,
    elements_text,
    summarize_arrays,
    ulp_distance,
    value_kind,
)
from timetravel.sim.elided import ElidedArray, ElidedError
from timetravel.sim.encoding import array_digest, digest
from timetravel.sim.timefmt import format_time

CHANGES_MAX_DEFAULT = 200
"""Changes kept in a DiffResult; the rest are only counted (``omitted``)."""
DEPTH_MAX = 64
"""Nesting depth past which two differing subtrees are reported as one change."""
VALUE_TEXT_CHARS_MAX = 60
"""Longest rendering of one scalar inside a summary line."""
ELEMENTS_DETAIL_MAX = 32
"""Differing array elements a change's detail names."""
EVENT_KEYS = frozenset({"t_ns", "dst", "kind", "payload"})
"""The keys of a pending event in a world's tree (``seq`` left out): such lists match by identity."""
TIME_KEYS = frozenset({"t", "t_start", "t_end", "at", "t_ns"})

ADDED = "added"
REMOVED = "removed"
CHANGED = "changed"
TYPE = "type"
SHAPE = "shape"
DTYPE = "dtype"
CHANGE_KINDS = (ADDED, REMOVED, CHANGED, TYPE, SHAPE, DTYPE)


@dataclass(frozen=True)
class Change:
    """One difference: where (``path``), what kind, a one-line summary and structured detail."""

    path: str
    change: str
    summary: str
    detail: dict[str, Any] = field(default_factory=dict)

    def to_data(self) -> dict[str, Any]:
        return {"path": self.path, "change": self.change, "summary": self.summary, "detail": self.detail}


@dataclass(frozen=True)
class DiffResult:
    """The changes in walk order (at most ``changes_max``) and how many more were found."""

    changes: tuple[Change, ...]
    omitted: int = 0

    @property
    def equal(self) -> bool:
        return not self.changes and not self.omitted

    @property
    def total(self) -> int:
        return len(self.changes) + self.omitted

    def paths(self) -> list[str]:
        return [change.path for change in self.changes]

    def to_data(self) -> dict[str, Any]:
        return {"changes": [change.to_data() for change in self.changes], "omitted": self.omitted}


def diff(a: Any, b: Any, path: str = "", *, changes_max: int = CHANGES_MAX_DEFAULT) -> DiffResult:
    """Every difference between ``a`` and ``b`` (plain data and numpy arrays), under ``path``."""
    if changes_max < 0:
        raise ValueError("changes_max must be >= 0")
    kept: list[Change] = []
    omitted = 0
    for change in _walk(a, b, path, 0):
        if len(kept) < changes_max:
            kept.append(change)
        else:
            omitted += 1
    return DiffResult(tuple(kept), omitted)


def _walk(a: Any, b: Any, path: str, depth: int) -> Iterator[Change]:
    if a is b:
        return
    if isinstance(a, ElidedArray) or isinstance(b, ElidedArray):
        if _digest_of(a) == _digest_of(b):
            return  # the same bits (what an elided array stands for: sim/elided.py)
        raise ElidedError(f"{path or 'the value'} differs: its values are rebuilt by re-execution")
    kind_a, kind_b = value_kind(a), value_kind(b)
    if kind_a != kind_b:
        yield Change(
            path,
            TYPE,
            f"{_typed_text(kind_a, a)}{_nonzero_text(a)} -> {_typed_text(kind_b, b)}{_nonzero_text(b)}",
            {"a_type": kind_a, "b_type": kind_b},
        )
        return
    if depth >= DEPTH_MAX:
        if not _deep_equal(a, b):
            yield Change(path, CHANGED, "differs (below the depth limit)", {})
        return
    if kind_a == "dict":
        yield from _walk_dict(a, b, path, depth)
    elif kind_a == "list":
        yield from _walk_list(a, b, path, depth)
    elif kind_a == "array":
        change = _array_change(a, b, path)
        if change is not None:
            yield change
    else:
        change = _scalar_change(a, b, path)
        if change is not None:
            yield change


def _digest_of(value: Any) -> bytes | None:
    """The array digest of a real or elided array (None for anything else)."""
    if isinstance(value, ElidedArray):
        return value.digest
    if isinstance(value, np.ndarray):
        return array_digest(value)
    return None


def _join(path: str, key: str | int) -> str:
    return f"{path}/{key}" if path else str(key)


def _walk_dict(a: dict[str, Any], b: dict[str, Any], path: str, depth: int) -> Iterator[Change]:
    for key, value in a.items():
        child = _join(path, key)
        if key in b:
            yield from _walk(value, b[key], child, depth + 1)
        else:
            yield Change(child, REMOVED, f"only in a: {_text(value)}", {"a": _brief(value)})
    for key, value in b.items():
        if key not in a:
            yield Change(_join(path, key), ADDED, f"only in b: {_text(value)}", {"b": _brief(value)})


def _record_ids(items: Any) -> list[str] | None:
    """The items' ``id`` values when every item is a dict with a unique str ``id``, else None."""
    if not items or not all(isinstance(item, dict) and isinstance(item.get("id"), str) for item in items):
        return None
    ids = [item["id"] for item in items]
    return ids if len(set(ids)) == len(ids) else None


def _is_event_list(items: Any) -> bool:
    return bool(items) and all(isinstance(item, dict) and set(item) == EVENT_KEYS for item in items)


def _walk_list(a: Any, b: Any, path: str, depth: int) -> Iterator[Change]:
    ids_a, ids_b = _record_ids(a), _record_ids(b)
    if (ids_a is not None or not a) and (ids_b is not None or not b) and (ids_a or ids_b):
        yield from _walk_records(a, b, ids_a or [], ids_b or [], path, depth)
        return
    if (_is_event_list(a) or not a) and (_is_event_list(b) or not b) and (a or b):
        yield from _walk_events(a, b, path)
        return
    common = min(len(a), len(b))
    for index in range(common):
        yield from _walk(a[index], b[index], _join(path, index), depth + 1)
    for index in range(common, len(a)):
        yield Change(_join(path, index), REMOVED, f"only in a: {_text(a[index])}", {"a": _brief(a[index])})
    for index in range(common, len(b)):
        yield Change(_join(path, index), ADDED, f"only in b: {_text(b[index])}", {"b": _brief(b[index])})


def _walk_records(
    a: Any, b: Any, ids_a: list[str], ids_b: list[str], path: str, depth: int
) -> Iterator[Change]:
    """Records matched by id: ``faults/f2`` removed is one change, ``faults/f5/t_start`` another."""
    by_id_b = dict(zip(ids_b, b, strict=True))
    for record_id, record in zip(ids_a, a, strict=True):
        child = _join(path, record_id)
        if record_id in by_id_b:
            yield from _walk(record, by_id_b[record_id], child, depth + 1)
        else:
            yield Change(child, REMOVED, f"only in a: {_record_text(record)}", {"a": _brief_record(record)})
    known = set(ids_a)
    for record_id, record in zip(ids_b, b, strict=True):
        if record_id not in known:
            yield Change(
                _join(path, record_id),
                ADDED,
                f"only in b: {_record_text(record)}",
                {"b": _brief_record(record)},
            )


def _event_key(event: dict[str, Any]) -> tuple[Any, ...]:
    return (event["t_ns"], event["kind"], event["dst"], digest(event["payload"]))


def _event_name(event: dict[str, Any]) -> str:
    """A pending event's path segment: ``fault->r3@975.329546ms`` (no ``/``: paths split on it)."""
    return f"{event['kind']}->{event['dst']}@{format_time(int(event['t_ns']))}".replace("/", "|")


def _walk_events(a: Any, b: Any, path: str) -> Iterator[Change]:
    """Pending events matched as a multiset by (time, kind, destination, payload digest)."""
    keys_a, keys_b = [_event_key(event) for event in a], [_event_key(event) for event in b]
    for events, keys, others, change in ((a, keys_a, keys_b, REMOVED), (b, keys_b, keys_a, ADDED)):
        available: dict[tuple[Any, ...], int] = {}
        for key in others:
            available[key] = available.get(key, 0) + 1
        side = "a" if change == REMOVED else "b"
        for event, key in zip(events, keys, strict=True):
            if available.get(key, 0):
                available[key] -= 1
                continue
            yield Change(
                _join(path, _event_name(event)),
                change,
                f"only in {side}: payload {_text(event['payload'])}",
                {},
            )


def _record_text(record: dict[str, Any]) -> str:
    """``corrupt r3 975.329546ms`` — a record's id-less gist, for one line per dropped record."""
    words = [
        str(record[key]) for key in ("kind", "target", "node", "name") if isinstance(record.get(key), str)
    ]
    for key in ("t_start", "t"):
        if isinstance(record.get(key), int) and not isinstance(record.get(key), bool):
            words.append(format_time(record[key]))
            break
    return f"{record['id']} " + " ".join(words) if words else f"{record['id']} {_text(record)}"


def _brief_record(record: dict[str, Any]) -> dict[str, Any]:
    return {key: _brief(value) for key, value in record.items()}


def _typed_text(kind: str, value: Any) -> str:
    """``int 3``, ``none None``; a container's own text already says its kind (``array bfloat16[8]``)."""
    text = _text(value)
    return text if text.startswith(kind) else f"{kind} {text}"


def _nonzero_text(value: Any) -> str:
    """For an array facing a non-array (a pending bit mask against None): its few nonzero elements."""
    if not isinstance(value, np.ndarray) or value.size == 0:
        return ""
    nonzero = int(np.count_nonzero(element_bits(value).any(axis=1)))
    if nonzero == 0:
        return " (all zero)"
    if nonzero > ELEMENTS_SHOWN:
        return f" ({nonzero} nonzero)"
    return f" ({nonzero} nonzero: {elements_text(differing_elements(value, None, ELEMENTS_SHOWN))})"


# -- scalars ------------------------------------------------------------------------------------


def _scalar_change(a: Any, b: Any, path: str) -> Change | None:
    if isinstance(a, np.generic):
        a = a.item()
    if isinstance(b, np.generic):
        b = b.item()
    if isinstance(a, float):
        return _float_change(float(a), float(b), path)
    if a == b:
        return None
    detail: dict[str, Any] = {"a": _brief(a), "b": _brief(b)}
    if isinstance(a, int) and not isinstance(a, bool):
        detail["delta"] = b - a
        if _is_time_key(path) and isinstance(b, int):
            return Change(path, CHANGED, f"{format_time(a)} -> {format_time(b)} ({b - a:+d} ns)", detail)
        return Change(path, CHANGED, f"{a} -> {b} ({b - a:+d})", detail)
    if isinstance(a, bytes):
        offset = next((i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        detail = {"a_length": len(a), "b_length": len(b), "first_offset": offset}
        return Change(
            path, CHANGED, f"bytes differ from offset {offset} ({len(a)} -> {len(b)} bytes)", detail
        )
    return Change(path, CHANGED, f"{_text(a)} -> {_text(b)}", detail)


def _is_time_key(path: str) -> bool:
    key = path.rsplit("/", 1)[-1]
    return key in TIME_KEYS or key.endswith("_ns")


def _float_change(a: float, b: float, path: str) -> Change | None:
    bits_a = np.array(a, dtype=np.float64).view(np.uint64)
    bits_b = np.array(b, dtype=np.float64).view(np.uint64)
    if bits_a == bits_b:
        return None
    detail: dict[str, Any] = {"a": a, "b": b}
    summary = f"{a!r} -> {b!r}"
    if np.isfinite(a) and np.isfinite(b):
        ulp = int(ulp_distance(np.array([a]), np.array([b]))[0])
        detail.update(abs=abs(b - a), ulp=ulp)
        summary += f" (abs {abs(b - a):.3g}, {ulp} ulp)"
    return Change(path, CHANGED, summary, detail)


# -- arrays -------------------------------------------------------------------------------------


def _array_change(a: np.ndarray, b: np.ndarray, path: str) -> Change | None:
    if a.dtype != b.dtype:
        return Change(
            path,
            DTYPE,
            f"dtype {a.dtype.name} -> {b.dtype.name} (shape {list(a.shape)} -> {list(b.shape)})",
            {
                "a_dtype": a.dtype.name,
                "b_dtype": b.dtype.name,
                "a_shape": list(a.shape),
                "b_shape": list(b.shape),
            },
        )
    if a.shape != b.shape:
        return Change(
            path,
            SHAPE,
            f"shape {list(a.shape)} -> {list(b.shape)} ({a.dtype.name})",
            {"a_shape": list(a.shape), "b_shape": list(b.shape), "dtype": a.dtype.name},
        )
    summary = summarize_arrays(a, b)
    if summary.differing == 0:
        return None
    elements = differing_elements(a, b, ELEMENTS_DETAIL_MAX)
    detail = summary.to_data()
    detail["elements"] = elements
    return Change(path, CHANGED, array_summary_text(summary, elements), detail)


# -- rendering helpers --------------------------------------------------------------------------


def _deep_equal(a: Any, b: Any) -> bool:
    for _ in _walk(a, b, "", 0):
        return False
    return True


def _brief(value: Any) -> Any:
    """A small JSON-friendly stand-in for a value in a change's detail."""
    if isinstance(value, (bool, int, float, type(None))):
        return value
    if isinstance(value, str):
        return value if len(value) <= VALUE_TEXT_CHARS_MAX else value[:VALUE_TEXT_CHARS_MAX] + "..."
    return _text(value)


def _text(value: Any) -> str:
    """A short rendering of any value: scalars as repr, containers and arrays by their size."""
    if isinstance(value, np.ndarray):
        return f"array {value.dtype.name}{list(value.shape)}"
    if isinstance(value, dict):
        return f"dict of {len(value)}"
    if isinstance(value, (list, tuple)):
        return f"list of {len(value)}"
    if isinstance(value, bytes):
        return f"bytes of {len(value)}"
    text = repr(value.item() if isinstance(value, np.generic) else value)
    return text if len(text) <= VALUE_TEXT_CHARS_MAX else text[: VALUE_TEXT_CHARS_MAX - 3] + "..."


def value_text(value: Any) -> str:
    """A short rendering of any value (what a diff's summary says of it)."""
    return _text(value)


def render_tree(result: DiffResult) -> list[str]:
    """The changes as an indented tree of path segments, one line per segment or change.

    ``nodes/rank3/weights`` and ``nodes/rank3/step`` share the ``nodes`` and ``rank3`` lines.
    """
    lines: list[str] = []
    open_segments: list[str] = []
    for change in result.changes:
        segments = change.path.split("/") if change.path else ["(root)"]
        shared = 0
        while (
            shared < min(len(open_segments), len(segments) - 1) and open_segments[shared] == segments[shared]
        ):
            shared += 1
        for depth in range(shared, len(segments) - 1):
            lines.append("  " * depth + segments[depth] + "/")
        open_segments = segments[:-1]
        lines.append("  " * (len(segments) - 1) + f"{segments[-1]}: {change.change} {change.summary}")
    if result.omitted:
        lines.append(f"... and {result.omitted} more changes")
    return lines
