"""Reductions in a fixed order: the one place where the bits of every all_reduce, reduce and
reduce_scatter are decided.

``contributions`` come in the order the World chose (rank order for ``reduce_order=canonical``, the
order they reached the reducer for ``arrival``); the result is folded left to right, one elementwise
operation at a time in the tensors' own dtype, so the same order gives the same bits on every run and
a different order gives exactly the rounding a real reducer would.
"""

from __future__ import annotations

from typing import Any

import numpy as np

REDUCE_OPS = ("sum", "avg", "product", "min", "max", "band", "bor", "bxor")


class UnsupportedReduction(ValueError):
    """A reduce op the simulator does not implement for this dtype (a clear failure, never a guess)."""


def fold(op: str, contributions: list[np.ndarray]) -> np.ndarray:
    """Reduce ``contributions`` left to right with ``op``; the result is a new array."""
    if op not in REDUCE_OPS:
        raise UnsupportedReduction(f"unsupported reduce op {op}")
    first = contributions[0]
    if first.dtype == np.bool_:
        return _fold_bool(op, contributions)
    if op in ("band", "bor", "bxor") and first.dtype.kind not in "iu":
        raise UnsupportedReduction(f"reduce op {op} needs an integer tensor, got {first.dtype}")
    step = _STEPS["sum" if op == "avg" else op]
    total = first.copy()
    for contribution in contributions[1:]:
        total = step(total, contribution)
    if op == "avg":
        if first.dtype.kind in "iu":
            raise UnsupportedReduction("reduce op avg needs a floating-point tensor")
        total = (total / np.asarray(len(contributions), dtype=first.dtype)).astype(first.dtype)
    return np.asarray(total, dtype=first.dtype)


def _fold_bool(op: str, contributions: list[np.ndarray]) -> np.ndarray:
    stacked = np.stack(contributions)
    if op in ("sum", "max", "bor"):
        return np.asarray(stacked.any(axis=0))
    if op in ("product", "min", "band"):
        return np.asarray(stacked.all(axis=0))
    if op == "bxor":
        return np.asarray(np.logical_xor.reduce(stacked, axis=0))
    raise UnsupportedReduction(f"reduce op {op} is not defined for bool tensors")


def _typed(function: Any) -> Any:
    def step(left: np.ndarray, right: np.ndarray) -> np.ndarray:
        return np.asarray(function(left, right), dtype=left.dtype)

    return step


_STEPS = {
    "sum": _typed(np.add),
    "product": _typed(np.multiply),
    "min": _typed(np.minimum),
    "max": _typed(np.maximum),
    "band": _typed(np.bitwise_and),
    "bor": _typed(np.bitwise_or),
    "bxor": _typed(np.bitwise_xor),
}
