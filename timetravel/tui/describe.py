"""One-line descriptions of plain-data values, as the state inspector and the diff view show them.

Arrays are summarized rather than printed: dtype and shape, min/max/mean of the finite values,
how many NaN and inf, and a sparkline of the values in order — so a NaN in one rank's weights is
visible from the tree without expanding it. Everything is bounded: strings and bytes are cut,
arrays are reduced once per description. Pure functions, no textual.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from timetravel.tui.charts import array_sparkline

TEXT_COLUMNS_MAX = 48
BYTES_SHOWN_MAX = 8
SPARKLINE_COLUMNS = 12
DTYPE_SHORT = {
    "float16": "f16",
    "float32": "f32",
    "float64": "f64",
    "bfloat16": "bf16",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "u8",
    "uint16": "u16",
    "uint32": "u32",
    "uint64": "u64",
    "bool": "bool",
}


@dataclass(frozen=True)
class ArrayStats:
    """What an array holds, in numbers: the finite range and the non-finite counts."""

    size: int
    minimum: float | None
    maximum: float | None
    mean: float | None
    nan: int
    inf: int
    first_nonfinite: int | None


def array_stats(array: np.ndarray) -> ArrayStats:
    """Statistics of a numeric array (non-numeric arrays report only their size)."""
    flat = np.asarray(array).reshape(-1)
    if flat.dtype.kind not in "fiub" or flat.size == 0:
        return ArrayStats(int(flat.size), None, None, None, 0, 0, None)
    values = flat.astype(np.float64, copy=False)
    finite = np.isfinite(values)
    nan = int(np.isnan(values).sum())
    inf = int(flat.size - finite.sum() - nan)
    first = int(np.argmin(finite)) if nan or inf else None
    if not finite.any():
        return ArrayStats(int(flat.size), None, None, None, nan, inf, first)
    good = values[finite]
    return ArrayStats(
        int(flat.size), float(good.min()), float(good.max()), float(good.mean()), nan, inf, first
    )


def number_text(value: float) -> str:
    """A float in at most 4 significant digits (NaN and inf spelled out)."""
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.4g}"


def dtype_text(array: np.ndarray) -> str:
    name = array.dtype.name
    shape = "x".join(str(size) for size in array.shape)
    return f"{DTYPE_SHORT.get(name, name)}[{shape}]"


def array_text(array: np.ndarray) -> tuple[str, str]:
    """(summary, alarm): the summary and, when the array holds NaN or inf, the alarm text."""
    stats = array_stats(array)
    words = [dtype_text(array)]
    if array.dtype.kind == "b":
        words.append(f"{int(np.count_nonzero(array))} true")
    elif stats.minimum is not None and stats.maximum is not None and stats.mean is not None:
        words.append(f"{number_text(stats.minimum)}..{number_text(stats.maximum)}")
        words.append(f"mean {number_text(stats.mean)}")
        if array.size > 1:
            words.append(array_sparkline(array, SPARKLINE_COLUMNS))
    alarm = ""
    if stats.nan or stats.inf:
        counts = [f"{name} {count}" for name, count in (("nan", stats.nan), ("inf", stats.inf)) if count]
        alarm = f"{' '.join(counts)} (first at {stats.first_nonfinite})"
    return " ".join(words), alarm


def scalar_text(value: Any) -> str:
    if isinstance(value, str):
        shown = value if len(value) <= TEXT_COLUMNS_MAX else value[: TEXT_COLUMNS_MAX - 1] + "…"
        return repr(shown)
    if isinstance(value, bytes):
        head = value[:BYTES_SHOWN_MAX].hex()
        return f"bytes[{len(value)}] {head}{'…' if len(value) > BYTES_SHOWN_MAX else ''}"
    if isinstance(value, float):
        return number_text(value)
    if isinstance(value, np.generic):
        return scalar_text(value.item())
    return repr(value)


def is_container(value: Any) -> bool:
    return isinstance(value, (dict, list, tuple)) or (isinstance(value, np.ndarray) and value.size > 0)


def describe(value: Any) -> tuple[str, str]:
    """(summary, alarm) for any plain-data value; alarm is non-empty for NaN/inf."""
    if isinstance(value, np.ndarray):
        return array_text(value)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        fields = ", ".join(
            f"{name}={scalar_text(item)}" for name, item in zip(value._fields, value, strict=False)
        )
        return f"{type(value).__name__}({fields})"[: TEXT_COLUMNS_MAX * 2], ""
    if isinstance(value, dict):
        return f"{{{len(value)}}}", ""
    if isinstance(value, (list, tuple)):
        return f"[{len(value)}]", ""
    if isinstance(value, float) and not math.isfinite(value):
        return number_text(value), "not finite"
    return scalar_text(value), ""


def children(value: Any) -> list[tuple[Any, Any]]:
    """(key, child) pairs of a container, in order (dict keys, list indices)."""
    if isinstance(value, dict):
        return list(value.items())
    if isinstance(value, (list, tuple)):
        return list(enumerate(value))
    return []


def array_rows(array: np.ndarray, per_row: int, rows_max: int) -> list[tuple[str, str]]:
    """Rows of an array's first values (``[0:8] 0.1 0.2 …``) and where its NaNs are."""
    flat = np.asarray(array).reshape(-1)
    lines: list[tuple[str, str]] = []
    stats = array_stats(array)
    if stats.nan or stats.inf:
        where = np.flatnonzero(~np.isfinite(flat.astype(np.float64, copy=False)))
        shown = ", ".join(str(int(index)) for index in where[:8])
        more = f" (+{where.size - 8})" if where.size > 8 else ""
        lines.append((f"nonfinite at {shown}{more}", "alarm"))
    for start in range(0, min(flat.size, per_row * rows_max), per_row):
        chunk = flat[start : start + per_row]
        text = " ".join(str(item) for item in chunk)  # numpy's shortest exact text per dtype
        lines.append((f"[{start}:{start + len(chunk)}] {text}", ""))
    if flat.size > per_row * rows_max:
        lines.append((f"… {flat.size - per_row * rows_max} more", ""))
    return lines


def lookup(document: Any, path: Sequence[Any]) -> Any:
    """The value at ``path`` (dict keys and list indices) in a plain-data document."""
    value = document
    for key in path:
        if isinstance(value, dict):
            value = value[key]
        elif isinstance(value, (list, tuple)):
            value = value[int(key)]
        else:
            raise KeyError(f"{key!r}: not a container")
    return value


def path_text(path: Sequence[Any]) -> str:
    """``nodes/rank3/weights``: the slash-separated form users type."""
    return "/".join(str(key) for key in path)
