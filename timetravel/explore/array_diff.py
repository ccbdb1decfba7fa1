"""How two numpy arrays of one shape and dtype differ, element by element and bit by bit.

What a person debugging numerics asks first: how many elements differ, the largest absolute and
ULP difference, the first differing index, the NaN/Inf counts on each side, and which elements
differ (index, old and new value, the bits that differ). Comparison is bitwise: ``0.0`` and
``-0.0`` differ, two NaNs with the same bits are equal. Used by the structural diff
(:mod:`timetravel.explore.diff`) and by ``explain``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from timetravel.sim.elided import ElidedArray

ELEMENTS_SHOWN = 4
"""Differing elements named in a one-line summary (a diff's detail carries more)."""

_UNSIGNED_BY_WIDTH = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_FLOAT_BY_WIDTH = {8: np.float32, 16: np.float64}


@dataclass(frozen=True)
class ArraySummary:
    """How two arrays of one shape and dtype differ (every figure is over elements)."""

    shape: tuple[int, ...]
    dtype: str
    differing: int
    """Elements whose bits differ."""
    first_index: tuple[int, ...] | None
    """Index of the first differing element in C order, or None when none differs."""
    max_abs: float | int | None
    """Largest |a - b| over differing pairs where both are finite; None when there is none."""
    max_ulp: int | None
    """Largest distance in units in the last place over such pairs (floats only)."""
    nan_a: int
    nan_b: int
    inf_a: int
    inf_b: int

    def to_data(self) -> dict[str, Any]:
        return {
            "shape": list(self.shape),
            "dtype": self.dtype,
            "differing": self.differing,
            "first_index": None if self.first_index is None else list(self.first_index),
            "max_abs": self.max_abs,
            "max_ulp": self.max_ulp,
            "nan_a": self.nan_a,
            "nan_b": self.nan_b,
            "inf_a": self.inf_a,
            "inf_b": self.inf_b,
        }


def value_kind(value: Any) -> str:
    """``dict``, ``list``, ``array``, ``str``, ``bytes``, ``bool``, ``int``, ``float``, ``none`` or the type's name
    (a numpy scalar is the kind of its Python value)."""
    if isinstance(value, dict):
        return "dict"
    if isinstance(value, (list, tuple)):
        return "list"
    if isinstance(value, (np.ndarray, ElidedArray)):
        return "array"
    if isinstance(value, np.generic):
        return value_kind(value.item())
    if value is None:
        return "none"
    return type(value).__name__


def is_float(dtype: np.dtype[Any]) -> bool:
    return dtype.kind == "f" or dtype.name == "bfloat16"


def _element_value(value: Any) -> Any:
    item = value.item() if isinstance(value, np.generic) else value
    if isinstance(value, np.generic) and value.dtype.name == "bfloat16":
        item = float(value)
    return item


def differing_elements(a: np.ndarray, b: np.ndarray | None, limit: int) -> list[dict[str, Any]]:
    """Up to ``limit`` differing elements of two same-shape arrays (``b`` None: ``a``'s nonzero
    elements): ``{"index", "a", "b", "bits"}`` where ``bits`` lists the bit positions that differ
    (0 is the least significant bit of the element's raw bits)."""
    bits_a = element_bits(a)
    bits_b = np.zeros_like(bits_a) if b is None else element_bits(b)
    flipped = bits_a ^ bits_b
    positions = np.flatnonzero(flipped.any(axis=1))[:limit]
    flat_a = np.ascontiguousarray(a).reshape(-1)
    flat_b = None if b is None else np.ascontiguousarray(b).reshape(-1)
    elements = []
    for position in positions.tolist():
        index = [int(i) for i in np.unravel_index(position, a.shape)] if a.shape else []
        mask = [int(word) for word in flipped[position]]
        width = 8 * flipped.dtype.itemsize
        bits = [
            column * width + bit
            for column, word in enumerate(mask)
            for bit in range(width)
            if word >> bit & 1
        ]
        elements.append(
            {
                "index": index,
                "a": _element_value(flat_a[position]),
                "b": None if flat_b is None else _element_value(flat_b[position]),
                "bits": bits,
            }
        )
    return elements


def elements_text(elements: list[dict[str, Any]], shown: int = ELEMENTS_SHOWN) -> str:
    """``[1234] 0.0123 -> 5.12e+03 (bit 14)``, one per element, joined by ``; ``."""
    words = []
    for element in elements[:shown]:
        bits = element["bits"]
        bit_text = (
            f"bit {bits[0]}"
            if len(bits) == 1
            else f"{len(bits)} bits"
            if len(bits) > 3
            else ("bits " + ",".join(str(bit) for bit in bits))
        )
        if element["b"] is None:
            words.append(f"{element['index']} {bit_text}")
            continue
        value = f"{_number(element['a'])} -> {_number(element['b'])}"
        words.append(f"{element['index']} {value} ({bit_text})")
    return "; ".join(words)


def _number(value: Any) -> str:
    return repr(value)


def element_bits(array: np.ndarray) -> np.ndarray:
    """Each element's bits as unsigned integers, one row per element (complex: two columns)."""
    flat = np.ascontiguousarray(array).reshape(-1)
    if flat.dtype.kind == "c":
        parts = flat.view(_FLOAT_BY_WIDTH[flat.dtype.itemsize]).reshape(-1, 2)
        return parts.view(_UNSIGNED_BY_WIDTH[parts.dtype.itemsize])
    return flat.view(_UNSIGNED_BY_WIDTH[flat.dtype.itemsize]).reshape(-1, 1)


def ulp_distance(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Units in the last place between finite floats of one dtype, as uint64 (exact for float64).

    The bits of a float read as sign and magnitude; the magnitudes of two floats of one sign
    are ordered like the floats, so their distance is |ma - mb|, and across zero it is ma + mb.
    """
    width = a.dtype.itemsize
    unsigned = _UNSIGNED_BY_WIDTH[width]
    sign_bit = np.uint64(1 << (8 * width - 1))
    bits_a = a.view(unsigned).astype(np.uint64)
    bits_b = b.view(unsigned).astype(np.uint64)
    magnitude_a = bits_a & (sign_bit - np.uint64(1))
    magnitude_b = bits_b & (sign_bit - np.uint64(1))
    same_sign = (bits_a & sign_bit) == (bits_b & sign_bit)
    larger = np.maximum(magnitude_a, magnitude_b)
    smaller = np.minimum(magnitude_a, magnitude_b)
    return np.where(same_sign, larger - smaller, magnitude_a + magnitude_b)


def summarize_arrays(a: np.ndarray, b: np.ndarray) -> ArraySummary:
    """The figures of :class:`ArraySummary` for two arrays of the same shape and dtype."""
    if a.shape != b.shape or a.dtype != b.dtype:
        raise ValueError("summarize_arrays needs two arrays of one shape and dtype")
    differ_mask = (element_bits(a) != element_bits(b)).any(axis=1)
    differing = int(np.count_nonzero(differ_mask))
    first_index = None
    if differing:
        first_flat = int(np.argmax(differ_mask))
        first_index = tuple(int(i) for i in np.unravel_index(first_flat, a.shape)) if a.shape else ()
    nan_a = nan_b = inf_a = inf_b = 0
    max_abs: float | int | None = None
    max_ulp: int | None = None
    dtype = a.dtype
    if is_float(dtype) or dtype.kind == "c":
        flat_a, flat_b = a.reshape(-1), b.reshape(-1)
        nan_a, nan_b = int(np.count_nonzero(np.isnan(flat_a))), int(np.count_nonzero(np.isnan(flat_b)))
        inf_a, inf_b = int(np.count_nonzero(np.isinf(flat_a))), int(np.count_nonzero(np.isinf(flat_b)))
        finite = differ_mask & np.isfinite(flat_a) & np.isfinite(flat_b)
        if finite.any():
            pair_a, pair_b = flat_a[finite], flat_b[finite]
            wide = np.complex128 if dtype.kind == "c" else np.float64
            max_abs = float(np.max(np.abs(pair_a.astype(wide) - pair_b.astype(wide))))
            if is_float(dtype):
                max_ulp = int(np.max(ulp_distance(pair_a, pair_b)))
    elif dtype.kind in "iu" and differing:
        pair_a, pair_b = a.reshape(-1)[differ_mask], b.reshape(-1)[differ_mask]
        larger, smaller = np.maximum(pair_a, pair_b), np.minimum(pair_a, pair_b)
        if dtype.kind == "i":
            max_abs = int(
                np.max(larger.astype(np.int64).astype(object) - smaller.astype(np.int64).astype(object))
            )
        else:
            max_abs = int(np.max(larger - smaller))
    return ArraySummary(
        shape=tuple(int(n) for n in a.shape),
        dtype=dtype.name,
        differing=differing,
        first_index=first_index,
        max_abs=max_abs,
        max_ulp=max_ulp,
        nan_a=nan_a,
        nan_b=nan_b,
        inf_a=inf_a,
        inf_b=inf_b,
    )


def array_summary_text(summary: ArraySummary, elements: list[dict[str, Any]] | None = None) -> str:
    """One line: ``12/4096 elements differ, first at [37], max abs 1.2e-07, max 3 ulp, NaN 0 -> 5``;
    with ``elements``, those elements first (``1/2042 elements differ: [1234] 0.5 -> 2.1e+38 (bit 30)``)."""
    total = int(np.prod(summary.shape)) if summary.shape else 1
    words = [f"{summary.differing}/{total} elements differ"]
    if elements:
        words[0] += ": " + elements_text(elements)
        if summary.differing > ELEMENTS_SHOWN:
            words[0] += "; ..."
    elif summary.first_index is not None:
        words.append(f"first at {list(summary.first_index)}")
    if summary.max_abs is not None:
        words.append(
            f"max abs {summary.max_abs:.3g}"
            if isinstance(summary.max_abs, float)
            else f"max abs {summary.max_abs}"
        )
    if summary.max_ulp is not None:
        words.append(f"max {summary.max_ulp} ulp")
    if summary.nan_a or summary.nan_b:
        words.append(f"NaN {summary.nan_a} -> {summary.nan_b}")
    if summary.inf_a or summary.inf_b:
        words.append(f"Inf {summary.inf_a} -> {summary.inf_b}")
    return ", ".join(words)
