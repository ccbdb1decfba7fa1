"""Fixed-order arithmetic: the only maths dp_training does, so its bits do not depend on the CPU.

A BLAS matrix product sums in an order that depends on the CPU's kernel (OpenBLAS picks a
different blocking on Haswell and on Skylake-X), so the same weights give different bits on two
machines. Every product here is instead an element-wise multiply, which IEEE 754 rounds exactly
once per element on every CPU, followed by ``np.add.accumulate`` along the contracted axis:
accumulate is defined as a running sum, ``out[k] = out[k - 1] + x[k]``, so its order is fixed by
its definition rather than by an implementation's blocking. Norms are summed the same way in
float64 and their square root comes from ``math.sqrt`` (correctly rounded).

numpy's transcendental functions (exp, log, tanh) have SIMD variants that differ between CPUs in
the last bit; the model uses only +, -, *, /, sqrt and max, which are exact-rounded everywhere.

BLAS is still pinned to one thread (:func:`pin_blas_threads`) as a second line of defence, for
code that might one day call it.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
from typing import Any

import numpy as np


class _DtypesByName(dict[str, np.dtype[Any]]):
    """A dict whose bfloat16 entry is made on first use: ml_dtypes costs ~0.55 s to import, which
    every command that only lists scenarios or opens a recording would pay (see timetravel.cli).
    After the first lookup it is an ordinary dict entry, so the hot paths look it up at dict speed."""

    _LAZY = ("bfloat16",)

    def __missing__(self, name: str) -> np.dtype[Any]:
        if name not in self._LAZY:
            raise KeyError(name)
        import ml_dtypes

        self[name] = np.dtype(ml_dtypes.bfloat16)
        return self[name]

    def __contains__(self, name: object) -> bool:
        return name in self._LAZY or dict.__contains__(self, name)


DTYPES: dict[str, np.dtype[Any]] = _DtypesByName(float32=np.dtype(np.float32), float64=np.dtype(np.float64))
"""Names a config may use for the model dtype and the reduction dtype."""
COMPUTE_DTYPE = np.dtype(np.float32)
"""Forward, backward and optimizer maths run in float32 whatever the storage dtype."""
LOOP_SLICE_ELEMENTS_MIN = 128
"""From this many elements per slice on, a sequential sum loops over slices instead of accumulating."""
BLAS_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
_OPENBLAS_SETTERS = (
    "scipy_openblas_set_num_threads64_",
    "scipy_openblas_set_num_threads",
    "openblas_set_num_threads64_",
    "openblas_set_num_threads",
)


@functools.cache
def pin_blas_threads() -> bool:
    """Ask BLAS for one thread; True when a loaded OpenBLAS accepted the call.

    The environment variables reach BLAS libraries loaded later (and subprocesses); the direct
    call reaches the OpenBLAS that numpy already loaded. Done once per process.
    """
    for variable in BLAS_THREAD_VARIABLES:
        os.environ.setdefault(variable, "1")
    library = _loaded_openblas()
    if library is None:
        return False
    for name in _OPENBLAS_SETTERS:
        setter = getattr(library, name, None)
        if setter is not None:
            setter(1)
            return True
    return False


def _loaded_openblas() -> Any:
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "openblas" in line.lower() and "/" in line}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def contract(left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """``left @ right`` (M x K times K x N) summed over k = 0, 1, ... in that order."""
    if left.shape[1] != right.shape[0]:
        raise ValueError(f"cannot contract shapes {left.shape} and {right.shape}")
    if left.shape[1] == 0:
        return np.zeros((left.shape[0], right.shape[1]), dtype=np.result_type(left, right))
    return sequential_sum(left.T[:, :, None] * right[:, None, :])


def stack_rows(arrays: list[np.ndarray]) -> np.ndarray:
    """``np.stack(arrays)`` for arrays of one shape (the ranks' weights, batches, contributions):
    the same array, from one ``np.concatenate``. At 10,000 ranks np.stack spends more on a view of
    each array (``expand_dims``) than on copying them: ~8 ms against ~3 ms. Arrays of different
    shapes go to np.stack, which says what is wrong."""
    if not arrays:
        return np.stack(arrays)
    shape = arrays[0].shape
    if not shape or any(array.shape != shape for array in arrays):
        return np.stack(arrays)
    return np.concatenate(arrays).reshape(len(arrays), *shape)


def sequential_sum(stack: np.ndarray) -> np.ndarray:
    """``stack[0] + stack[1] + ...`` along axis 0, left to right, in the stack's dtype.

    Two ways to add in that order, with the same bits: an in-place loop over the slices (fast when
    each slice is large) and ``np.add.accumulate`` (one call, fast when the slices are small).
    """
    if stack.shape[0] == 1:
        return stack[0].copy()
    if stack[0].size < LOOP_SLICE_ELEMENTS_MIN:
        return np.add.accumulate(stack, axis=0)[-1].copy()
    total = stack[0].copy()
    for index in range(1, stack.shape[0]):
        total += stack[index]
    return total


def sum_of_squares(values: np.ndarray) -> float:
    """Sum of squares in float64, left to right (inf when it overflows, nan when a value is)."""
    flat = values.reshape(-1).astype(np.float64)
    if flat.size == 0:
        return 0.0
    with np.errstate(over="ignore", invalid="ignore"):
        return float(np.add.accumulate(flat * flat)[-1])


def norm(values: np.ndarray) -> float:
    """Euclidean norm, fixed order, correctly rounded square root (nan and inf pass through)."""
    total = sum_of_squares(values)
    return math.sqrt(total) if math.isfinite(total) else total


def all_finite(values: np.ndarray) -> bool:
    return bool(np.isfinite(values).all())
