"""Tensors as the coordinator sees them: numpy arrays decoded from the wire, checked before allocation.

The coordinator holds the World and never imports torch; a tensor arrives as
``{"dtype": "float32", "shape": [4, 8], "data": ...}``, its data ``bytes`` when small and otherwise a
read-only uint8 array over its frame in the message's buffer (timetravel/torch/protocol/wire.py), which
:func:`decode` views in place. The byte count must equal what the dtype and shape say before an array
is made, so a rank cannot make the coordinator allocate more than it sent.
"""

from __future__ import annotations

import math
from typing import Any

import ml_dtypes
import numpy as np

from timetravel.sim.elided import ElidedArray, summarize, summary_of
from timetravel.sim.encoding import PAGE_BYTES, page_digests
from timetravel.torch.protocol.limits import FRAME_BYTES_MIN

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


def decode(wire: Any) -> np.ndarray | ElidedArray:
    """The numpy array of a wire tensor (read-only, sharing the message's bytes); a tensor described
    without its bytes (a recorded call re-executed without its rank: world/journal.py) is elided."""
    if not isinstance(wire, dict):
        raise TensorFormatError("a tensor must be a map of dtype, shape and data")
    if "pages" in wire and "data" not in wire:
        return described(wire)
    dtype = DTYPES.get(wire.get("dtype"))  # type: ignore[arg-type]
    if dtype is None:
        raise TensorFormatError(f"unsupported tensor dtype {wire.get('dtype')!r}")
    shape = wire.get("shape")
    if not isinstance(shape, list) or not all(type(size) is int and size >= 0 for size in shape):
        raise TensorFormatError(f"bad tensor shape {shape!r}")
    data: Any = wire.get("data")
    frame = isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 1
    if not isinstance(data, bytes) and not frame:
        raise TensorFormatError("tensor data must be bytes (or a frame of the message)")
    expected = math.prod(shape) * dtype.itemsize
    if expected != len(data):
        raise TensorFormatError(
            f"tensor of shape {shape} and dtype {wire['dtype']} needs {expected} bytes, got {len(data)}"
        )
    if isinstance(data, bytes):
        return np.frombuffer(data, dtype=dtype).reshape(shape)
    array = np.ascontiguousarray(data).view(dtype).reshape(shape)
    array.flags.writeable = False
    return array


def decode_summarized(wire: Any) -> tuple[np.ndarray | ElidedArray, tuple[str, int]]:
    """:func:`decode` and the tensor's summary (xxh3-64 hex, non-finite elements): the one the wire
    carries when the coordinator read it already (a recorded poll: world/journal.py), else read now."""
    array = decode(wire)
    digest, nonfinite = wire.get("digest"), wire.get("nonfinite")
    if isinstance(digest, str) and type(nonfinite) is int:
        return array, (digest, nonfinite)
    return array, summary_of(array)


def described(wire: dict[str, Any]) -> ElidedArray:
    """An elided array from its description (dtype, shape, page digests and optionally the summary
    ``digest``/``nonfinite``), checked as a tensor's bytes are: the page count must fit the size."""
    dtype, shape, pages = wire.get("dtype"), wire.get("shape"), wire.get("pages")
    if dtype not in DTYPES or not isinstance(shape, list) or not isinstance(pages, list):
        raise TensorFormatError(f"a malformed tensor description: {dtype!r}, {shape!r}")
    if not all(type(size) is int and size >= 0 for size in shape):
        raise TensorFormatError(f"bad tensor shape {shape!r}")
    size = math.prod(shape) * DTYPES[dtype].itemsize
    if len(pages) != max(-(-size // PAGE_BYTES), 1) or not all(
        isinstance(page, bytes) and len(page) == 16 for page in pages
    ):
        raise TensorFormatError(f"a tensor description with {len(pages)} page digests for {size} bytes")
    summary = None
    if isinstance(wire.get("digest"), str) and type(wire.get("nonfinite")) is int:
        summary = (wire["digest"], wire["nonfinite"])
    return ElidedArray(dtype, shape, tuple(pages), summary)


def describe(array: np.ndarray | ElidedArray) -> dict[str, Any]:
    """The description of a tensor (:func:`described` reads it back): its summary included."""
    described: dict[str, Any] = {"dtype": dtype_name(array), "shape": list(array.shape)}
    if isinstance(array, ElidedArray):
        described["pages"] = list(array.page_digests)
        if array.summary is not None:
            described["digest"], described["nonfinite"] = array.summary
        return described
    described["pages"] = page_digests(array)
    described["digest"], described["nonfinite"] = summarize(array)
    return described


def out_of_band(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` (a result the World hands a rank) in wire form: each output the World holds as an
    array (a collective's result) or as wire bytes (the store's) with its large bytes as an array over
    those same bytes, which the wire sends as a frame: the World's own copy is neither copied nor
    changed."""
    results = message.get("results")
    if message.get("kind") != "result" or not isinstance(results, dict):
        return message
    lifted = {}
    for work, outputs in results.items():
        if isinstance(outputs, list):
            outputs = [_lifted(output) for output in outputs]
        lifted[work] = outputs
    return {**message, "results": lifted}


def _lifted(wire: Any) -> Any:
    if isinstance(wire, np.ndarray):  # a collective's output as the World holds it: sent as a view
        view = np.ascontiguousarray(wire).reshape(-1).view(np.uint8)
        if view.nbytes < FRAME_BYTES_MIN:
            return {"dtype": dtype_name(wire), "shape": list(wire.shape), "data": view.tobytes()}
        return {"dtype": dtype_name(wire), "shape": list(wire.shape), "data": view}
    if not isinstance(wire, dict):
        return wire
    data = wire.get("data")
    if not isinstance(data, bytes) or len(data) < FRAME_BYTES_MIN:
        return wire
    return {**wire, "data": np.frombuffer(data, dtype=np.uint8)}


def encode(array: np.ndarray, dtype_name: str) -> dict[str, Any]:
    """The wire form of an array (C order)."""
    return {"dtype": dtype_name, "shape": list(array.shape), "data": np.ascontiguousarray(array).tobytes()}


def dtype_name(array: np.ndarray | ElidedArray) -> str:
    for name, dtype in DTYPES.items():
        if dtype == array.dtype:
            return name
    raise TensorFormatError(f"unsupported numpy dtype {array.dtype}")


def nonfinite_count(array: Any) -> int:
    """How many elements are NaN or infinite (0 for integer and bool arrays; an elided array's
    summary: sim/elided.py)."""
    return summary_of(array)[1]


def element_repr(array: np.ndarray, element: int) -> str:
    """The repr of element ``element`` of ``array`` (flat, C order)."""
    return repr(np.asarray(array).reshape(-1)[element].item())


def flipped(array: np.ndarray, element: int, bit: int) -> list[Any]:
    """[a copy of ``array`` with bit ``bit`` of element ``element`` flipped, the element's repr
    before, after] (a corrupt fault: torch/world/faults.py)."""
    copy = np.array(array, copy=True)
    flat = copy.reshape(-1)
    before = flat[element].item()
    raw = flat[element : element + 1].view(np.uint8)
    raw[bit // 8] ^= np.uint8(1 << (bit % 8))
    return [copy, repr(before), repr(flat[element].item())]
