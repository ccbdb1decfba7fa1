"""What ``timetravel inspect`` shows: a state path's value, summarized and bounded.

Paths are the explore engine's (:mod:`timetravel.explore.paths`: ``nodes/rank3/weights``, the
world's public parts as one tree). Summaries are JSON-able and bounded: arrays become their dtype,
shape and statistics (min, max, mean, NaN and Inf counts, the first values), long lists and dicts
show their first entries and a count of the rest.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from timetravel.explore.paths import PathError, get, parse_path, select, world_tree
from timetravel.sim.elided import ElidedArray, ElidedError
from timetravel.sim.world import World

SUMMARY_ITEMS_MAX = 20
"""Entries of a dict or list shown before the rest is counted."""
SUMMARY_DEPTH_DEFAULT = 3
ARRAY_FIRST_VALUES = 8


def resolve(world: World, path: str) -> Any:
    """The value at ``path`` in the world tree (``nodes/*/seen``: a map from each match's path);
    a PathError names what exists where the path stops."""
    tree = world_tree(world)
    parsed = parse_path(path)
    if parsed.has_wildcard:
        matches = select(tree, parsed)
        if not matches:
            raise PathError(f"path {path!r} matches nothing here")
        return dict(matches)
    try:
        return get(tree, parsed)
    except PathError:
        pass
    value: Any = tree
    walked: list[str] = []
    for segment in parsed.segments:
        where = "/".join(walked) or "/"
        if isinstance(value, dict) and segment in value:
            value = value[segment]
        elif isinstance(value, (list, tuple)) and segment.isdigit() and int(segment) < len(value):
            value = value[int(segment)]
        elif isinstance(value, dict):
            keys = [str(key) for key in value]
            shown = ", ".join(keys[:SUMMARY_ITEMS_MAX])
            more = f", ... ({len(keys)} in all)" if len(keys) > SUMMARY_ITEMS_MAX else ""
            raise PathError(f"{where} has no key {segment!r} (keys: {shown or 'none'}{more})")
        elif isinstance(value, (list, tuple)):
            raise PathError(f"{where} is a list of {len(value)}: {segment!r} is not an index in it")
        else:
            raise PathError(f"{where} is a {type(value).__name__}, which has no {segment!r}")
        walked.append(segment)
    raise PathError(f"path {path!r} names nothing here")


def summarize_array(array: np.ndarray) -> dict[str, Any]:
    """dtype, shape and statistics of an array (floats: NaN/Inf counts and finite min/max/mean)."""
    summary: dict[str, Any] = {"array": str(array.dtype), "shape": list(array.shape), "size": int(array.size)}
    flat = array.reshape(-1)
    if array.dtype.kind in "fc" or str(array.dtype) == "bfloat16":
        values = flat.astype(np.complex128 if array.dtype.kind == "c" else np.float64)
        finite = np.isfinite(values)
        summary["nan"] = int(np.isnan(values).sum())
        summary["inf"] = int((~finite).sum()) - summary["nan"]
        real = values[finite].real if array.dtype.kind == "c" else values[finite]
    elif array.dtype.kind in "iub":
        real = flat.astype(np.float64)
    else:
        real = np.zeros(0)
    if real.size:
        summary.update(min=_number(real.min()), max=_number(real.max()), mean=_number(real.mean()))
    summary["first"] = [_plain(item) for item in flat[:ARRAY_FIRST_VALUES].tolist()]
    return summary


def summarize(value: Any, depth: int = SUMMARY_DEPTH_DEFAULT) -> Any:
    """A bounded JSON-able view of ``value`` (see the module docstring). An elided array (its values
    not stored here: sim/elided.py) raises ElidedError: the caller rebuilds the world, or says so."""
    if isinstance(value, np.ndarray):
        return summarize_array(value)
    if isinstance(value, ElidedArray):
        raise ElidedError(f"the values of this {value!r} are rebuilt by re-execution")
    if isinstance(value, np.generic):
        return _plain(value.item())
    if isinstance(value, dict):
        if depth <= 0:
            return {"dict": len(value)}
        items = list(value.items())
        shown = {str(key): summarize(item, depth - 1) for key, item in items[:SUMMARY_ITEMS_MAX]}
        if len(items) > SUMMARY_ITEMS_MAX:
            shown["..."] = f"{len(items) - SUMMARY_ITEMS_MAX} more"
        return shown
    if isinstance(value, (list, tuple)):
        if depth <= 0:
            return {"list": len(value)}
        shown_list = [summarize(item, depth - 1) for item in value[:SUMMARY_ITEMS_MAX]]
        if len(value) > SUMMARY_ITEMS_MAX:
            shown_list.append(f"... {len(value) - SUMMARY_ITEMS_MAX} more")
        return shown_list
    return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return f"<{len(value)} bytes>"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, complex):
        return str(value)
    return value


def _number(value: Any) -> Any:
    number = float(value)
    return number if math.isfinite(number) else str(number)


def render(value: Any, indent: int = 0) -> list[str]:
    """Lines of an indented tree for a summary made by :func:`summarize`."""
    pad = "  " * indent
    if isinstance(value, dict) and "array" in value and "shape" in value:
        stats = " ".join(
            f"{key}={value[key]}" for key in ("min", "max", "mean", "nan", "inf") if key in value
        )
        return [f"{pad}{value['array']}{value['shape']} {stats} first={value['first']}"]
    if isinstance(value, dict):
        lines = []
        for key, item in value.items():
            if (
                isinstance(item, (dict, list))
                and item
                and not ("array" in item if isinstance(item, dict) else False)
            ):
                lines.append(f"{pad}{key}:")
                lines.extend(render(item, indent + 1))
            else:
                lines.extend(_leaf(f"{pad}{key}: ", item, indent))
        return lines
    if isinstance(value, list):
        lines = []
        for position, item in enumerate(value):
            if isinstance(item, (dict, list)) and item and not (isinstance(item, dict) and "array" in item):
                lines.append(f"{pad}[{position}]:")
                lines.extend(render(item, indent + 1))
            else:
                lines.extend(_leaf(f"{pad}[{position}] ", item, indent))
        return lines
    return [f"{pad}{value!r}"]


def _leaf(prefix: str, item: Any, indent: int) -> list[str]:
    if isinstance(item, dict) and "array" in item:
        return [prefix + render(item, 0)[0]]
    return [f"{prefix}{item!r}" if not isinstance(item, str) else f"{prefix}{item}"]
