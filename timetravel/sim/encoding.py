"""Plain data to bytes and back: the one encoding that hashing, the chain and recordings share.

The world is plain data (None, bool, int, float, str, bytes, list, dict with str keys) and numpy
arrays. msgpack encodes the plain part; an array travels as an extension type holding its dtype
*name* (from an allow-list, so a file can never ask us to build an arbitrary object), its shape
and its bytes. Decoding is bounded: every size has a named limit, because a recording is
untrusted input.

For hashing, an array is replaced by its *digest*: xxh3-128 over its dtype, its shape and the
digests of its fixed-size pages. The snapshot store splits arrays into the same pages, so it can
compute the same digest from pages it already holds, and a snapshot's Merkle root equals
``World.state_hash()`` without re-reading unchanged data. An :class:`~timetravel.sim.elided.ElidedArray`
(dtype, shape and page digests of an array whose bytes a recording did not keep) hashes to the same
digest; it has no bytes to encode otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import msgpack
import numpy as np
import xxhash

from timetravel.sim.elided import ElidedArray, ElidedError

EXT_ARRAY = 1
EXT_ARRAY_DIGEST = 2
PAGE_BYTES = 64 * 1024
ARRAY_BYTES_MAX = 1 << 31
ARRAY_DIMENSIONS_MAX = 32
DECODE_BYTES_MAX = 1 << 31
DECODE_CONTAINER_LENGTH_MAX = 50_000_000
DECODE_DEPTH_MAX = 128
"""A decoded value nests containers at most this deep (the deepest recording we have: 10). A forged
one nested 1,000 deep decoded, then made every command end in a RecursionError; nesting is a
limit checked while decoding, like sizes (:func:`unpackb_bounded`; the compiled decoder, sim/
_speedups_plain.h PLAIN_DEPTH_MAX, hands a deeper value back to it)."""
MSGPACK_STACK_DEPTH = 1024
"""msgpack-python refuses a value whose containers nest deeper than this (StackError: the fixed
stack of its C unpacker; tests/test_encoding.py pins it)."""
_DEPTH_WRAPPERS = MSGPACK_STACK_DEPTH - DECODE_DEPTH_MAX
_DEPTH_PREFIX = b"\x91" * _DEPTH_WRAPPERS
"""One-element arrays (msgpack fixarray 1) a value is decoded inside (:func:`unpackb_bounded`)."""
DEPTH_SCAN_BYTES_MAX = 4096
"""Bytes that :func:`unpackb_bounded` scans for container headers before choosing to decode them
unwrapped; larger ones are wrapped at once (copying them costs a tenth of scanning them: a seek's
BLOBS frames of a few MB each were scanned for nothing, since their headers always exceed the depth)."""
_NOT_CONTAINER_TAGS = bytes(code for code in range(256) if not (0x80 <= code <= 0x9F or 0xDC <= code <= 0xDF))
"""Every byte but msgpack's map and array headers (fixmap, fixarray, array 16/32, map 16/32)."""
PACKER_BUFFER_BYTES = 4096
"""Initial buffer of each msgpack Packer (it grows as needed).

``msgpack.packb`` starts every call with a 256 KiB buffer; when an array inside a value makes the
``default`` hook call ``packb`` again, two such buffers are live at once and glibc serves the
second with mmap/munmap, which made hashing one small node state cost ~25 us instead of ~6 us.
A small initial buffer keeps every call on the heap; the bytes produced are identical.
"""

_ALLOWED_DTYPES: dict[str, np.dtype[Any]] = {
    name: np.dtype(name)
    for name in (
        "bool",
        "int8",
        "int16",
        "int32",
        "int64",
        "uint8",
        "uint16",
        "uint32",
        "uint64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    )
}
_LAZY_DTYPES = ("bfloat16",)
"""Allowed dtypes that come from ml_dtypes, which costs ~0.55 s to import: it is loaded when such an
array is first encoded or decoded, not by every command that imports the kernel. An array can only
have this dtype once something imported ml_dtypes, so encoding never needs it sooner."""


class DecodeError(ValueError):
    """Bytes that are not a valid encoding of plain data; the message says what is wrong."""


_NAMES_BY_DTYPE: dict[np.dtype[Any], str] = {dtype: name for name, dtype in _ALLOWED_DTYPES.items()}
"""``dtype.name`` is computed in Python by numpy (~5 us); every array in a chain batch asks for it."""


def _load_lazy_dtypes() -> None:
    import ml_dtypes

    _ALLOWED_DTYPES["bfloat16"] = np.dtype(ml_dtypes.bfloat16)
    _NAMES_BY_DTYPE[_ALLOWED_DTYPES["bfloat16"]] = "bfloat16"


def dtype_name(dtype: np.dtype[Any]) -> str:
    """The allow-listed name of ``dtype``; any other dtype is refused (it is not world data)."""
    known = _NAMES_BY_DTYPE.get(dtype)
    if known is not None:
        return known
    name = dtype.name
    if name in _LAZY_DTYPES:
        _load_lazy_dtypes()
    if name not in _ALLOWED_DTYPES or _ALLOWED_DTYPES[name] != dtype:
        raise TypeError(
            f"numpy dtype {dtype!s} is not allowed in the world (allowed: {sorted({*_ALLOWED_DTYPES, *_LAZY_DTYPES})})"
        )
    return name


def dtype_from_name(name: str) -> np.dtype[Any]:
    """The dtype for an allow-listed name read from untrusted bytes."""
    dtype = _ALLOWED_DTYPES.get(name)
    if dtype is None and name in _LAZY_DTYPES:
        _load_lazy_dtypes()
        dtype = _ALLOWED_DTYPES.get(name)
    if dtype is None:
        raise DecodeError(f"array dtype {name!r} is not in the allow-list")
    return dtype


def _array_header(array: np.ndarray) -> list[Any]:
    return [dtype_name(array.dtype), list(array.shape)]


def _encode_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        array = np.ascontiguousarray(value)
        return msgpack.ExtType(EXT_ARRAY, _packb([*_array_header(array), array.tobytes()]))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, ElidedArray):
        raise ElidedError(f"a {value!r} has no bytes to encode (only its digest is known)")
    raise TypeError(
        f"{type(value).__name__} is not plain data (the world holds only plain data and numpy arrays)"
    )


def _packb(value: Any, default: Any = None) -> bytes:
    """``msgpack.packb`` with a small initial buffer (see PACKER_BUFFER_BYTES)."""
    return msgpack.Packer(default=default, use_bin_type=True, buf_size=PACKER_BUFFER_BYTES).pack(value)


def pack(value: Any) -> bytes:
    """Encode plain data (with numpy arrays) as msgpack bytes."""
    return _packb(value, _encode_default)


def reusable_packer() -> msgpack.Packer:
    """A Packer that packs as ``pack`` does but keeps its buffer from one value to the next
    (``pack``, then ``bytes()``, then ``reset()``, which keeps the capacity).

    For callers packing values of a megabyte again and again (a recording's BLOBS and MANIFEST
    frames): ``pack`` starts each at PACKER_BUFFER_BYTES and doubles its buffer up to the value's
    size, ten reallocations that copy about the value's size again."""
    return msgpack.Packer(default=_encode_default, use_bin_type=True, autoreset=False)


def _decode_array(data: bytes) -> np.ndarray:
    header = msgpack.unpackb(
        data, raw=False, max_bin_len=ARRAY_BYTES_MAX, max_array_len=ARRAY_DIMENSIONS_MAX + 3
    )
    if not isinstance(header, list) or len(header) != 3:
        raise DecodeError("array extension is not [dtype, shape, bytes]")
    name, shape, raw = header
    if not isinstance(name, str) or not isinstance(shape, list) or not isinstance(raw, bytes):
        raise DecodeError("array extension has fields of the wrong types")
    check_shape(shape)
    dtype = dtype_from_name(name)
    count = math.prod(shape)
    if count * dtype.itemsize != len(raw):
        raise DecodeError(
            f"array of shape {shape} and dtype {name} needs {count * dtype.itemsize} bytes, got {len(raw)}"
        )
    return np.frombuffer(raw, dtype=dtype).reshape(shape).copy()


def check_shape(shape: Any) -> None:
    """A decoded array shape: at most ARRAY_DIMENSIONS_MAX sizes, each 0..ARRAY_BYTES_MAX (checked in
    Python integers, before numpy sees it: numpy's own product overflows and warns)."""
    if (
        not isinstance(shape, list | tuple)
        or len(shape) > ARRAY_DIMENSIONS_MAX
        or not all(
            isinstance(size, int) and not isinstance(size, bool) and 0 <= size <= ARRAY_BYTES_MAX
            for size in shape
        )
    ):
        raise DecodeError(
            f"array shape {list(shape) if isinstance(shape, list | tuple) else shape!r} is not valid"
        )
    if math.prod(shape) > ARRAY_BYTES_MAX:
        raise DecodeError(f"array shape {list(shape)} has more than {ARRAY_BYTES_MAX} elements")


class ItemBudget:
    """Counts the containers and container entries a decode builds (msgpack's list and map hooks
    run once per container, innermost first), so that a payload of millions of empty lists stops
    at ``items_max`` instead of filling memory with them."""

    def __init__(self, items_max: int) -> None:
        self.left = items_max
        self.items_max = items_max

    def take(self, value: Any) -> Any:
        self.left -= len(value) + 1
        if self.left < 0:
            raise DecodeError(f"decodes to more than {self.items_max} containers and entries")
        return value


def _ext_hook(code: int, data: bytes) -> Any:
    if code == EXT_ARRAY:
        return _decode_array(data)
    raise DecodeError(f"unknown msgpack extension type {code}")


def unpackb_bounded(data: bytes, *, budget: ItemBudget | None = None, **options: Any) -> Any:
    """``msgpack.unpackb(data, **options)``, refusing a value nested deeper than DECODE_DEPTH_MAX
    (DecodeError) while decoding. Bytes with more map and array headers than that are decoded
    inside _DEPTH_WRAPPERS one-element arrays, so that msgpack's own fixed stack of
    MSGPACK_STACK_DEPTH stops a deeper value before it is built (a copy of the bytes, and ~0.7 ms of
    list hooks; fewer headers cannot nest that deep, and decode as they are). ``budget`` counts
    what is built (not the wrapping arrays). Other errors are msgpack's."""
    data = bytes(data)
    if budget is not None:
        options.update(list_hook=budget.take, object_hook=budget.take)
    if (
        len(data) <= DEPTH_SCAN_BYTES_MAX
        and len(data.translate(None, _NOT_CONTAINER_TAGS)) <= DECODE_DEPTH_MAX
    ):
        return msgpack.unpackb(data, **options)  # too few container headers to nest deeper
    if budget is not None:
        budget.left += 2 * _DEPTH_WRAPPERS  # each wrapping array: its length and itself
    try:
        value = msgpack.unpackb(_DEPTH_PREFIX + data, **options)
    except msgpack.StackError:
        raise DecodeError(f"nested more than {DECODE_DEPTH_MAX} deep") from None
    for _wrapper in range(_DEPTH_WRAPPERS):
        value = value[0]
    return value


def unpack(data: bytes, *, bytes_max: int = DECODE_BYTES_MAX, items_max: int | None = None) -> Any:
    """Decode bytes made by :func:`pack`, with size limits on everything; raises DecodeError.

    ``items_max``: also cap the containers and container entries decoded (untrusted input)."""
    if len(data) > bytes_max:
        raise DecodeError(f"encoded value of {len(data)} bytes exceeds the limit of {bytes_max}")
    return unpack_bounded(data, _ext_hook, bytes_max=bytes_max, items_max=items_max)


def unpack_bounded(
    data: bytes, ext_hook: Callable[[int, bytes], Any], *, bytes_max: int, items_max: int | None = None
) -> Any:
    """msgpack with every string, bytes and extension capped at ``bytes_max``, every container at
    ``DECODE_CONTAINER_LENGTH_MAX`` (and ``items_max`` in all, when given) and nesting at
    DECODE_DEPTH_MAX (:func:`unpackb_bounded`); anything wrong, an error of ``ext_hook`` included, is
    a DecodeError."""
    budget = ItemBudget(items_max) if items_max is not None else None
    length_max = (
        DECODE_CONTAINER_LENGTH_MAX if items_max is None else min(DECODE_CONTAINER_LENGTH_MAX, items_max)
    )
    try:
        return unpackb_bounded(
            data,
            budget=budget,
            raw=False,
            strict_map_key=True,
            ext_hook=ext_hook,
            max_bin_len=bytes_max,
            max_str_len=bytes_max,
            max_array_len=length_max,
            max_map_len=length_max,
            max_ext_len=bytes_max,
        )
    except DecodeError:
        raise
    except (ValueError, TypeError, KeyError, msgpack.UnpackException) as error:
        raise DecodeError(f"not valid msgpack: {error}") from error


def page_digests(array: np.ndarray) -> list[bytes]:
    """xxh3-128 digests of the array's bytes cut into PAGE_BYTES pages (one page if smaller)."""
    raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8).data
    if len(raw) <= PAGE_BYTES:
        return [xxhash.xxh3_128_digest(raw)]
    return [
        xxhash.xxh3_128_digest(raw[start : start + PAGE_BYTES]) for start in range(0, len(raw), PAGE_BYTES)
    ]


def array_digest_from_pages(name: str, shape: list[int] | tuple[int, ...], digests: list[bytes]) -> bytes:
    """The digest of an array given its dtype name, shape and page digests."""
    hasher = xxhash.xxh3_128()
    hasher.update(_packb([name, list(shape)]))
    for digest in digests:
        hasher.update(digest)
    return hasher.digest()


def elided(array: np.ndarray) -> ElidedArray:
    """The stand-in of a real array (sim/elided.py): its dtype, shape and page digests."""
    return ElidedArray(dtype_name(array.dtype), array.shape, tuple(page_digests(array)))


def array_digest(array: np.ndarray) -> bytes:
    """The digest that stands for an array inside hashed data (see the module docstring)."""
    return array_digest_from_pages(dtype_name(array.dtype), array.shape, page_digests(array))


def _hash_default(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return msgpack.ExtType(EXT_ARRAY_DIGEST, array_digest(value))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, ElidedArray):  # hashes as the array it stands for (sim/elided.py)
        return msgpack.ExtType(EXT_ARRAY_DIGEST, value.digest)
    raise TypeError(
        f"{type(value).__name__} is not plain data (the world holds only plain data and numpy arrays)"
    )


def pack_for_hash(value: Any) -> bytes:
    """Encode plain data with every array replaced by its digest (the form that is hashed)."""
    return _packb(value, _hash_default)


def digest(value: Any) -> bytes:
    """xxh3-128 of plain data, arrays by their page digests."""
    return xxhash.xxh3_128_digest(pack_for_hash(value))


def merkle_root(parts: list[tuple[str, bytes]]) -> bytes:
    """xxh3-128 over (name, digest) pairs in the given order: the root over a world's parts."""
    return xxhash.xxh3_128_digest(
        b"".join([name.encode() + b"\x00" + part_digest for name, part_digest in parts])
    )


PLAIN_SCALARS = (type(None), bool, int, float, str, bytes)


def check_plain(value: Any, path: str = "") -> None:
    """Raise TypeError naming the path of the first value that is not plain data."""
    if isinstance(value, np.ndarray):
        dtype_name(value.dtype)
        return
    if isinstance(value, ElidedArray):
        dtype_from_name(value.dtype_name)
        return
    if isinstance(value, PLAIN_SCALARS):
        return
    if isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            check_plain(item, f"{path}/{index}")
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"{path or '/'}: dict key {key!r} is not a str")
            check_plain(item, f"{path}/{key}")
        return
    raise TypeError(f"{path or '/'}: {type(value).__name__} is not plain data")
