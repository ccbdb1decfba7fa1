"""A bounded structural diff of two plain-data values (node states), in JSON-friendly entries.

Each entry is ``{"path": "peers[2].epoch", "a": shown, "b": shown}`` where ``shown`` is the value
itself when it is a short scalar, or a short description (``list[8]``, ``array(64,) float32``,
``3 of 64 elements differ, first at (5,): 1.5 != 2.0``). Floats compare by bits, so ``-0.0`` and
``0.0`` differ and ``nan`` equals a ``nan`` with the same bits: the diff shows what the hash saw.
"""

from __future__ import annotations

import struct
from typing import Any

import numpy as np

DIFF_ENTRIES_MAX = 40
TEXT_CHARS_MAX = 80
ABSENT = "<absent>"

_pack_double = struct.Struct("<d").pack


def show(value: Any) -> Any:
    """``value`` as JSON: itself when short and scalar, else a one-line description."""
    if value is None or isinstance(value, bool | int):
        return value
    if isinstance(value, float):
        return value if np.isfinite(value) else repr(value)
    if isinstance(value, str):
        return value if len(value) <= TEXT_CHARS_MAX else value[: TEXT_CHARS_MAX - 3] + "..."
    if isinstance(value, bytes):
        return f"bytes[{len(value)}] {value[:16].hex()}{'...' if len(value) > 16 else ''}"
    if isinstance(value, np.ndarray):
        return f"array{value.shape} {value.dtype}"
    if isinstance(value, list | tuple | dict):
        return f"{type(value).__name__}[{len(value)}]"
    return f"<{type(value).__name__}>"


def _same_scalar(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return _pack_double(a) == _pack_double(b)
    return bool(a == b)


def diff_values(a: Any, b: Any, path: str = "", limit: int = DIFF_ENTRIES_MAX) -> list[dict[str, Any]]:
    """Up to ``limit`` entries describing where ``a`` and ``b`` differ (empty when equal)."""
    entries: list[dict[str, Any]] = []
    _diff(a, b, path, entries, limit)
    return entries


def _diff(a: Any, b: Any, path: str, entries: list[dict[str, Any]], limit: int) -> None:
    if len(entries) >= limit:
        return
    if isinstance(a, dict) and isinstance(b, dict):
        _diff_dicts(a, b, path, entries, limit)
    elif isinstance(a, list | tuple) and isinstance(b, list | tuple) and type(a) is type(b):
        _diff_sequences(a, b, path, entries, limit)
    elif isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        _diff_arrays(a, b, path, entries)
    elif not _same_scalar(a, b):
        entries.append({"path": path, "a": show(a), "b": show(b)})


def _diff_dicts(
    a: dict[Any, Any], b: dict[Any, Any], path: str, entries: list[dict[str, Any]], limit: int
) -> None:
    keys = list(a) + [key for key in b if key not in a]
    for key in keys:
        child = f"{path}.{key}" if path else str(key)
        if key not in b:
            entries.append({"path": child, "a": show(a[key]), "b": ABSENT})
        elif key not in a:
            entries.append({"path": child, "a": ABSENT, "b": show(b[key])})
        else:
            _diff(a[key], b[key], child, entries, limit)
        if len(entries) >= limit:
            return


def _diff_sequences(a: Any, b: Any, path: str, entries: list[dict[str, Any]], limit: int) -> None:
    for index in range(max(len(a), len(b))):
        child = f"{path}[{index}]"
        if index >= len(b):
            entries.append({"path": child, "a": show(a[index]), "b": ABSENT})
        elif index >= len(a):
            entries.append({"path": child, "a": ABSENT, "b": show(b[index])})
        else:
            _diff(a[index], b[index], child, entries, limit)
        if len(entries) >= limit:
            return


def _diff_arrays(a: np.ndarray, b: np.ndarray, path: str, entries: list[dict[str, Any]]) -> None:
    if a.shape != b.shape or a.dtype != b.dtype:
        entries.append({"path": path, "a": show(a), "b": show(b)})
        return
    itemsize = a.dtype.itemsize
    a_bytes = np.ascontiguousarray(a).view(np.uint8).reshape(*a.shape, itemsize)
    b_bytes = np.ascontiguousarray(b).view(np.uint8).reshape(*b.shape, itemsize)
    different = (a_bytes != b_bytes).any(axis=-1)  # bit for bit, as the state hash compares
    count = int(np.count_nonzero(different))
    if not count:
        return
    first = tuple(int(i) for i in np.argwhere(different)[0])
    message = f"{count} of {a.size} elements differ, first at {first}"
    entries.append(
        {"path": path, "a": f"{message}: {a[first].item()!r}", "b": f"{message}: {b[first].item()!r}"}
    )
