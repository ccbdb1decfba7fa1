"""Tensors as the coordinator sees them: numpy arrays decoded from the wire, checked before allocation.

The coordinator holds the World and never imports torch; a tensor arrives as
``{"dtype": "float32", "shape": [4, 8], "data": b"..."}``. The byte count must equal what the dtype
and shape say before an array is made, so a rank cannot make the coordinator allocate more than it
sent.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

DTYPES: dict[str, np.dtype[Any]] = {
    "float32": np.dtype(np.float32),
    "float64": np.dtype(np.float64),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
    "int64": np.dtype(np.int64),
    "int32": np.dtype(np.int32),
    "int16": np.dtype(np.int16),
    "int8": np.dtype(np.int8),
    "uint8": np.dtype(np.uint8),
    "bool": np.dtype(np.bool_),
    "complex64": np.dtype(np.complex64),
    "complex128": np.dtype(np.complex128),
}
FLOAT_DTYPES = ("float32", "float64", "float16", "bfloat16", "complex64", "complex128")


class TensorFormatError(ValueError):
    """A tensor on the wire whose dtype, shape or byte count does not add up."""


def decode(wire: Any) -> np.ndarray:
    """The numpy array of a wire tensor (read-only, sharing the message's bytes)."""
    if not isinstance(wire, dict):
        raise TensorFormatError("a tensor must be a map of dtype, shape and data")
    dtype = DTYPES.get(wire.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise TensorFormatError(f"unsupported tensor dtype {wire.get('dtype')!r}")
    shape = wire.get("shape")
    if not isinstance(shape, list) or not all(type(size) is int and size >= 0 for size in shape):
        raise TensorFormatError(f"bad tensor shape {shape!r}")
    data = wire.get("data")
    if not isinstance(data, bytes):
        raise TensorFormatError("tensor data must be bytes")
    expected = math.prod(shape) * dtype.itemsize
    if expected != len(data):
        raise TensorFormatError(
            f"tensor of shape {shape} and dtype {wire['dtype']} needs {expected} bytes, got {len(data)}"
        )
    return np.frombuffer(data, dtype=dtype).reshape(shape)


def encode(array: np.ndarray, dtype_name: str) -> dict[str, Any]:
    """The wire form of an array (C order)."""
    return {"dtype": dtype_name, "shape": list(array.shape), "data": np.ascontiguousarray(array).tobytes()}


def dtype_name(array: np.ndarray) -> str:
    for name, dtype in DTYPES.items():
        if dtype == array.dtype:
            return name
    raise TensorFormatError(f"unsupported numpy dtype {array.dtype}")


def nonfinite_count(array: np.ndarray) -> int:
    """How many elements are NaN or infinite (0 for integer and bool arrays)."""
    if array.dtype.kind not in "fc" and array.dtype != DTYPES["bfloat16"]:
        return 0
    return int(
        array.size
        - np.count_nonzero(
            np.isfinite(array.astype(np.float64) if array.dtype == DTYPES["bfloat16"] else array)
        )
    )
