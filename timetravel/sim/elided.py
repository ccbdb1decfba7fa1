"""An array whose bytes are not here: what a recording keeps of a tensor it did not store.

A torch recording stores what cannot be recomputed (docs/recording-format.md, format 1.2): a tensor a
rank sent or the World reduced is rebuilt by re-executing the ranks, so a snapshot may keep only its
dtype, shape and page digests. That is exactly what the World's hash reads of an array
(``encoding.array_digest``: xxh3-128 over the dtype name and shape, then the xxh3-128 of each
PAGE_BYTES page), so an :class:`ElidedArray` hashes, snapshots and compares as the array it stands
for: a world holding it has the state hash of the world holding the bytes, and a re-execution that
rebuilds the bytes is checked against it bit for bit.

It is not a numpy array: anything that needs its values (``np.asarray``, arithmetic, a summary)
raises :class:`ElidedError`, never computes over made-up bytes. A command that meets one rebuilds the
world by re-execution (a torch Session: ``TorchWorlds.materialize``) or says that it needs to.
"""

from __future__ import annotations

import math
from typing import Any

import msgpack
import numpy as np
import xxhash


class ElidedError(ValueError):
    """An elided array's values were asked for: they are rebuilt by re-execution, not stored."""


class ElidedArray:
    """Dtype name, shape and page digests of an array whose bytes are not kept (module docstring)."""

    __slots__ = ("_digest", "dtype_name", "page_digests", "shape", "summary")

    def __init__(
        self,
        dtype_name: str,
        shape: tuple[int, ...] | list[int],
        page_digests: tuple[bytes, ...],
        summary: tuple[str, int] | None = None,
    ):
        """``summary``: (xxh3-64 hex of its bytes, its non-finite elements), when known — what the
        World's digests of a tensor read (:func:`summarize`); not part of its hash."""
        assert all(isinstance(digest, bytes) and len(digest) == 16 for digest in page_digests)
        self.dtype_name = dtype_name
        self.shape = tuple(int(size) for size in shape)
        self.page_digests = tuple(page_digests)
        self.summary = summary
        self._digest: bytes | None = None

    @property
    def digest(self) -> bytes:
        """The digest that stands for the array in hashed data (``encoding.array_digest``)."""
        if self._digest is None:
            hasher = xxhash.xxh3_128()
            hasher.update(msgpack.packb([self.dtype_name, list(self.shape)], use_bin_type=True))
            for page in self.page_digests:
                hasher.update(page)
            self._digest = hasher.digest()
        return self._digest

    @property
    def dtype(self) -> np.dtype[Any]:
        if self.dtype_name == "bfloat16":
            import ml_dtypes  # as encoding.py: loaded only when such an array exists

            return np.dtype(ml_dtypes.bfloat16)
        return np.dtype(self.dtype_name)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ElidedArray) and other.digest == self.digest

    def __hash__(self) -> int:
        return hash(self.digest)

    def __repr__(self) -> str:
        return f"elided {self.dtype_name}{list(self.shape)}"

    def __array__(self, *args: Any, **kwargs: Any) -> Any:
        raise ElidedError(f"the values of this {self!r} are not stored: rebuilt by re-execution")

    def copy(self) -> ElidedArray:
        """Itself: an elided array is immutable (what a decode's copy of a cached array gives)."""
        return self

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d elided array")
        return self.shape[0]


FLOAT_KINDS = "fc"


def summarize(array: np.ndarray) -> tuple[str, int]:
    """(xxh3-64 hex of the array's bytes in C order, how many elements are NaN or infinite): what
    the World records of a tensor (torch/world/digests.py), also for an elided one."""
    contiguous = np.ascontiguousarray(array)
    digest = xxhash.xxh3_64_hexdigest(contiguous.reshape(-1).view(np.uint8).data)
    bfloat16 = array.dtype.name == "bfloat16"
    if array.dtype.kind not in FLOAT_KINDS and not bfloat16:
        return digest, 0
    if array.dtype.kind == "f" and array.dtype.itemsize <= 4 and _finite_sum(contiguous):
        return digest, 0  # the common case: one pass, no mask (a sum of them in float64 is finite)
    values = contiguous.astype(np.float64) if bfloat16 else contiguous
    return digest, int(array.size - np.count_nonzero(np.isfinite(values)))


def _finite_sum(array: np.ndarray) -> bool:
    """Whether the float64 sum of a float16/32 array is finite: then every element is (it cannot
    overflow: 2^31 elements of at most 3.4e38 stay far below float64's 1.8e308)."""
    return bool(np.isfinite(np.add.reduce(array.reshape(-1), dtype=np.float64)))


def summary_of(array: Any) -> tuple[str, int]:
    """:func:`summarize` of an array, or the summary an elided array carries (ElidedError without)."""
    if isinstance(array, ElidedArray):
        if array.summary is None:
            raise ElidedError(f"the digest of this {array!r} is not known: rebuilt by re-execution")
        return array.summary
    return summarize(array)


def is_array(value: Any) -> bool:
    """A numpy array or an elided one: what a world holds as an array."""
    return isinstance(value, (np.ndarray, ElidedArray))


__all__ = ["ElidedArray", "ElidedError", "is_array", "summarize", "summary_of"]
