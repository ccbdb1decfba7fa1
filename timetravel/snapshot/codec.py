"""Encoding values into blobs and pages, decoding them back, and the float page codec.

**Hash form.** A value is stored as the very bytes the kernel hashes (``encoding.pack_for_hash``):
msgpack with each numpy array replaced by an extension holding its digest. So one encoding pass
gives both the stored blob and its Merkle leaf, and the arrays travel beside it as pages. While
packing, :class:`Capture` cuts each array into PAGE_BYTES pages, hashes them (xxh3-128, as
``encoding.page_digests`` does) and reuses the page objects of the same array in the slot's
previous blob when the digests match: only changed pages are new.

**Page codec** (for recordings): a float page is stored as the XOR with the page it replaced in
the same slot, byte-shuffled (byte k of every element together, so the unchanged sign and
exponent bytes of a small update become long runs of zeros), and the recording's frame is then
zstd-compressed. A full (shuffled) page is written when the chain of XOR bases would exceed
XOR_CHAIN_MAX, so decoding a page never walks a long chain.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import msgpack
import numpy as np
import xxhash

from timetravel.sim.elided import ElidedArray
from timetravel.sim.encoding import (
    DECODE_CONTAINER_LENGTH_MAX,
    EXT_ARRAY_DIGEST,
    PACKER_BUFFER_BYTES,
    PAGE_BYTES,
    DecodeError,
    check_shape,
    dtype_from_name,
    dtype_name,
    unpack_bounded,
)
from timetravel.snapshot import speedups
from timetravel.snapshot.entries import ArrayEntry, Page

FLOAT_DTYPE_NAMES = frozenset({"float16", "bfloat16", "float32", "float64", "complex64", "complex128"})
XOR_CHAIN_MAX = 4
"""At most this many XOR deltas stand between a stored float page and a full one."""
CODEC_RAW = 0
CODEC_SHUFFLE = 1
CODEC_XOR_SHUFFLE = 2
CODEC_NAMES = {CODEC_RAW: "raw", CODEC_SHUFFLE: "shuffle", CODEC_XOR_SHUFFLE: "xor-shuffle"}
_decode_plain = getattr(speedups.compiled, "decode_plain", None)
"""The compiled decoder of stored values (snapshot/_speedups_plain.h; None: msgpack decodes every one)."""
_copy_plain = getattr(speedups.compiled, "copy_plain", None)
_decode_plain_against = getattr(speedups.compiled, "decode_plain_against", None)


class Capture:
    """One hash-form packing pass that collects the arrays it meets as :class:`ArrayEntry`.

    ``previous`` are the arrays of the blob this one replaces (same slot); the k-th array met is
    compared page by page with the k-th previous one when dtype and shape match. ``new_pages`` and
    ``bases`` (new page -> the page it replaced, for the XOR codec) are committed by the store
    only if the blob turns out to be new.
    """

    __slots__ = ("_packer", "arrays", "bases", "birth", "elide_bytes_min", "new_pages", "previous", "reused")

    def __init__(self, birth: int, elide_bytes_min: int | None = None) -> None:
        """``elide_bytes_min``: arrays of more bytes keep only their page digests (their pages are
        Page objects without bytes, unless the slot's previous array held the same page), so a
        recording that does not store them never copies them; None: every page keeps its bytes (a
        page without bytes in the previous array gets them again)."""
        self.birth = birth
        self.elide_bytes_min = elide_bytes_min
        self.previous: Sequence[ArrayEntry] = ()
        self.arrays: list[ArrayEntry] = []
        self.new_pages: list[Page] = []
        self.reused: set[int] = set()
        self.bases: dict[int, Page] = {}
        self._packer = msgpack.Packer(default=self._default, use_bin_type=True, buf_size=PACKER_BUFFER_BYTES)

    def pack(self, value: Any, previous: Sequence[ArrayEntry] = ()) -> bytes:
        """Hash-form bytes of ``value``; ``previous``: the arrays of the blob it replaces.

        One Capture serves a whole snapshot (one Packer, no per-value setup); the lists it
        fills describe the last value packed.
        """
        self.previous = previous
        self.arrays.clear()
        self.new_pages.clear()
        self.reused.clear()
        self.bases.clear()
        return self._packer.pack(value)

    def _default(self, value: Any) -> Any:
        if isinstance(value, np.ndarray):
            entry = self._array(value)
            return msgpack.ExtType(EXT_ARRAY_DIGEST, entry.digest)
        if isinstance(value, np.generic):
            return value.item()
        if isinstance(value, ElidedArray):
            return msgpack.ExtType(EXT_ARRAY_DIGEST, self._elided(value).digest)
        raise TypeError(
            f"{type(value).__name__} is not plain data (the world holds only plain data and numpy arrays)"
        )

    def _array(self, array: np.ndarray) -> ArrayEntry:
        name = _DTYPE_NAMES.get(array.dtype) or _dtype_name(array.dtype)
        shape = array.shape
        index = len(self.arrays)
        previous = self.previous[index] if index < len(self.previous) else None
        old_pages: tuple[Page, ...] = ()
        if previous is not None and previous.dtype == name and previous.shape == shape:
            old_pages = previous.pages
        elide = self.elide_bytes_min is not None and array.nbytes > self.elide_bytes_min
        if array.nbytes <= PAGE_BYTES and array.flags.c_contiguous and not elide:
            return self._small_array(array, name, shape, old_pages)
        raw = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
        size = len(raw)
        pages = []
        for number, start in enumerate(range(0, size, PAGE_BYTES) if size > PAGE_BYTES else (0,)):
            chunk = raw[start : start + PAGE_BYTES] if size > PAGE_BYTES else raw
            page_digest = xxhash.xxh3_128_digest(chunk)
            old = old_pages[number] if number < len(old_pages) else None
            if old is not None and old.digest == page_digest and (elide or old.data is not None):
                self.reused.add(id(old))
                pages.append(old)
                continue
            page = Page(page_digest, None if elide else bytes(chunk), self.birth)
            if old is not None and old.data is not None and not elide and name in FLOAT_DTYPE_NAMES:
                self.bases[id(page)] = old
            self.new_pages.append(page)
            pages.append(page)
        header = _array_header_bytes(name, shape)
        entry_digest = xxhash.xxh3_128_digest(header + b"".join([page.digest for page in pages]))
        entry = ArrayEntry(entry_digest, name, shape, tuple(pages))
        self.arrays.append(entry)
        return entry

    def _elided(self, array: ElidedArray) -> ArrayEntry:
        """An elided array: its pages are digests without bytes, unless the slot's previous array
        held the same page (then that page, bytes and all, is reused)."""
        index = len(self.arrays)
        previous = self.previous[index] if index < len(self.previous) else None
        old_pages: tuple[Page, ...] = ()
        if previous is not None and previous.dtype == array.dtype_name and previous.shape == array.shape:
            old_pages = previous.pages
        pages = []
        for number, page_digest in enumerate(array.page_digests):
            old = old_pages[number] if number < len(old_pages) else None
            if old is not None and old.digest == page_digest:
                self.reused.add(id(old))
                pages.append(old)
                continue
            page = Page(page_digest, None, self.birth)
            self.new_pages.append(page)
            pages.append(page)
        entry = ArrayEntry(array.digest, array.dtype_name, array.shape, tuple(pages))
        self.arrays.append(entry)
        return entry

    def _small_array(
        self, array: np.ndarray, name: str, shape: tuple[int, ...], old_pages: tuple[Page, ...]
    ) -> ArrayEntry:
        """The one-page case without slicing (most arrays of small node states)."""
        page_digest = xxhash.xxh3_128_digest(array)  # type: ignore[arg-type]  # any C-contiguous array (bfloat16 has no buffer format)
        old = old_pages[0] if old_pages else None
        if old is not None and old.digest == page_digest and old.data is not None:
            self.reused.add(id(old))
            page = old
        else:
            page = Page(page_digest, array.tobytes(), self.birth)
            if old is not None and old.data is not None and name in FLOAT_DTYPE_NAMES:
                self.bases[id(page)] = old
            self.new_pages.append(page)
        entry_digest = xxhash.xxh3_128_digest(_array_header_bytes(name, shape) + page_digest)
        entry = ArrayEntry(entry_digest, name, shape, (page,))
        self.arrays.append(entry)
        return entry


_DTYPE_NAMES: dict[np.dtype[Any], str] = {}
_ARRAY_HEADERS: dict[tuple[str, tuple[int, ...]], bytes] = {}
ARRAY_HEADER_CACHE_ENTRIES_MAX = 4096


def _dtype_name(dtype: np.dtype[Any]) -> str:
    name = _DTYPE_NAMES.get(dtype)
    if name is None:
        name = _DTYPE_NAMES[dtype] = dtype_name(dtype)
    return name


def _array_header_bytes(name: str, shape: tuple[int, ...]) -> bytes:
    """``msgpack([dtype, shape])``: what ``encoding.array_digest_from_pages`` hashes first."""
    key = (name, shape)
    header = _ARRAY_HEADERS.get(key)
    if header is None:
        if len(_ARRAY_HEADERS) >= ARRAY_HEADER_CACHE_ENTRIES_MAX:
            _ARRAY_HEADERS.clear()
        header = _ARRAY_HEADERS[key] = msgpack.packb([name, list(shape)])
    return header


ArrayFactory = Callable[[bytes], np.ndarray | ElidedArray]
"""``factory(array_digest) -> ndarray``: how a decoder turns an array reference into an array (an
ElidedArray when its bytes are not kept)."""


def decode_value(
    data: bytes, array_factory: ArrayFactory, *, bytes_max: int, items_max: int | None = None
) -> Any:
    """Decode a hash-form blob, rebuilding each array with ``array_factory`` (limits enforced;
    ``items_max`` caps the containers and entries built, for untrusted input)."""
    return decode_value_sized(data, array_factory, bytes_max=bytes_max, items_max=items_max)[0]


def _compiled_decode(decoder: Callable[..., Any], *arguments: Any) -> Any:
    """A compiled decoder's outcome; an error it raises (the array factory's, or one of its own on
    bad bytes) as the DecodeError msgpack's path raises."""
    try:
        return decoder(*arguments)
    except DecodeError:
        raise
    except (ValueError, TypeError, KeyError) as error:
        raise DecodeError(f"not valid msgpack: {error}") from error


def decode_value_sized(
    data: bytes,
    array_factory: ArrayFactory,
    *,
    bytes_max: int,
    items_max: int | None = None,
    arrays: dict[bytes, tuple[np.ndarray, int]] | None = None,
    copy_arrays: bool = False,
    shared: dict[bytes, Any] | None = None,
    untracked: bool = False,
) -> tuple[Any, int]:
    """:func:`decode_value`, and the bytes of the arrays it took from ``arrays`` (below).

    With snapshot's compiled code (snapshot/_speedups_plain.h ``decode_plain``) the common case is
    decoded in C, to the value msgpack gives (anything unusual, or over ``items_max``, is handed back and
    decoded here, which raises the error it always raised); ``arrays`` ({digest: (read-only array,
    nbytes)}, the reader's array cache) then supplies the arrays it holds without calling the
    factory (``copy_arrays``: a copy of each, as a writeable factory gives); they are what the
    returned bytes count. ``shared`` (a dict the caller keeps, or None) is for values nobody will
    write: their containers come out of the collector's reach (recording/shared_nodes.py
    ``untrack``) and the small ones are shared, by their bytes, with every value decoded with the
    same dict (equal bytes, equal values; not under ``items_max``, whose count a shared container
    would skip). ``untracked``: build the containers out of the collector's reach (as ``shared``
    does) without sharing any: a writeable value whose owner knows it stays acyclic
    (recording/shared_nodes.py: the states a seek re-executes). Without snapshot's compiled code these
    options change nothing but speed."""
    if _decode_plain is not None and len(data) <= DECODE_CONTAINER_LENGTH_MAX:
        decoded = _compiled_decode(
            _decode_plain,
            data,
            array_factory,
            bytes_max,
            shared is not None or untracked,
            shared,
            arrays,
            copy_arrays,
            items_max,
        )
        if decoded is not NotImplemented:
            return decoded

    def ext_hook(code: int, payload: bytes) -> Any:
        if code != EXT_ARRAY_DIGEST or len(payload) != 16:
            raise DecodeError(f"unexpected msgpack extension {code} in a stored value")
        return array_factory(payload)

    return unpack_bounded(data, ext_hook, bytes_max=bytes_max, items_max=items_max), 0


def decode_value_against(
    data: bytes,
    base: tuple[bytes, Any] | None,
    array_factory: ArrayFactory,
    *,
    bytes_max: int,
    arrays: dict[bytes, tuple[np.ndarray, int]] | None,
    shared: dict[bytes, Any],
) -> tuple[Any, int]:
    """:func:`decode_value_sized` of a read-only value (``shared``, no ``items_max``), sharing with
    ``base`` — ``(base_data, base_value)``, ``base_value`` what this function or
    ``decode_value_sized`` gave for ``base_data`` with the same ``bytes_max`` — every part whose
    bytes the two encodings have in common (snapshot/_speedups_against.h ``decode_plain_against``: a map
    with the base map's keys is a copy of the base's dict with only the entries whose bytes differ
    decoded again). Equal bytes decode to equal values, so the value is the one a decode gives; its
    containers are shared with ``base_value``, so only for values nobody writes (the Session's
    shared node states, recording/shared_nodes.py, each decoded against the one before it: at
    10,000 ranks neighbouring ranks' states differ in a few entries). ``shared`` serves the plain
    decode of a value the compiled code hands back (or all of them without it), not the parts
    decoded against the base. Without the compiled code, or for anything it hands back, this is
    ``decode_value_sized``."""
    if _decode_plain_against is not None and base is not None and len(data) <= DECODE_CONTAINER_LENGTH_MAX:
        # No memo here: what differs from the neighbour is nearly always the rank's own (its
        # children, its kernel's end time), so looking it up and keeping it by its bytes cost
        # more than it shared (first visits at 10,000 ranks: ~190 ms without, ~240-270 ms with).
        decoded = _compiled_decode(
            _decode_plain_against, data, base[0], base[1], array_factory, bytes_max, None, arrays
        )
        if decoded is not NotImplemented:
            return decoded
    return decode_value_sized(data, array_factory, bytes_max=bytes_max, arrays=arrays, shared=shared)


def fresh_copy(value: Any) -> Any:
    """What decoding ``value``'s bytes afresh gives (new dicts and lists, writeable arrays), copied
    from ``value`` by snapshot's compiled code (snapshot/_speedups_copy.h ``copy_plain``), or
    NotImplemented: no compiled code, or something in ``value`` that a decode does not build
    (decode it then)."""
    if _copy_plain is None:
        return NotImplemented
    return _copy_plain(value)


def build_array(dtype: str, shape: Sequence[int], pages: Sequence[bytes], *, writeable: bool) -> np.ndarray:
    """An array from its dtype name, shape and page bytes (checked against each other)."""
    check_shape(shape)
    kind = dtype_from_name(dtype)
    count = 1
    for size in shape:
        count *= size
    raw = pages[0] if len(pages) == 1 else b"".join(pages)
    if count * kind.itemsize != len(raw):
        raise DecodeError(
            f"array {dtype}{list(shape)} needs {count * kind.itemsize} bytes, pages hold {len(raw)}"
        )
    array = np.frombuffer(raw, dtype=kind).reshape(tuple(shape))
    if writeable:
        return array.copy()
    return array


def element_bytes(dtype: str) -> int:
    """Bytes per element of an allow-listed dtype name (the shuffle's stride)."""
    return dtype_from_name(dtype).itemsize


def shuffle(data: bytes, itemsize: int) -> bytes:
    """Byte k of every element together (the inverse is :func:`unshuffle`)."""
    if itemsize <= 1 or len(data) % itemsize:
        return data
    return np.frombuffer(data, dtype=np.uint8).reshape(-1, itemsize).T.tobytes()


def unshuffle(data: bytes, itemsize: int) -> bytes:
    if itemsize <= 1 or len(data) % itemsize:
        return data
    return np.frombuffer(data, dtype=np.uint8).reshape(itemsize, -1).T.tobytes()


def xor_bytes(left: bytes, right: bytes) -> bytes:
    """Bytewise XOR of two pages of equal length."""
    if len(left) != len(right):
        raise DecodeError(f"XOR of pages of {len(left)} and {len(right)} bytes")
    return np.bitwise_xor(np.frombuffer(left, dtype=np.uint8), np.frombuffer(right, dtype=np.uint8)).tobytes()


def encode_page(data: bytes, dtype: str, base: bytes | None) -> tuple[int, bytes]:
    """(codec, payload) of a page: XOR-shuffled against ``base`` when given, else shuffled or raw."""
    if dtype not in FLOAT_DTYPE_NAMES:
        return CODEC_RAW, data
    itemsize = element_bytes(dtype)
    if base is not None and len(base) == len(data):
        if itemsize <= 1 or len(data) % itemsize:
            return CODEC_XOR_SHUFFLE, xor_bytes(data, base)
        # XOR and shuffle in one pass over the page (shuffle(xor_bytes(...)) copies it once more)
        delta = np.bitwise_xor(np.frombuffer(data, dtype=np.uint8), np.frombuffer(base, dtype=np.uint8))
        return CODEC_XOR_SHUFFLE, delta.reshape(-1, itemsize).T.tobytes()
    return CODEC_SHUFFLE, shuffle(data, itemsize)


def decode_page(codec: int, payload: bytes, itemsize: int, base: bytes | None) -> bytes:
    """Invert :func:`encode_page`; ``base`` is the decoded base page for CODEC_XOR_SHUFFLE."""
    if codec == CODEC_RAW:
        return payload
    if codec == CODEC_SHUFFLE:
        return unshuffle(payload, itemsize)
    if codec == CODEC_XOR_SHUFFLE:
        if base is None:
            raise DecodeError("an XOR page needs its base page")
        return xor_bytes(unshuffle(payload, itemsize), base)
    raise DecodeError(f"unknown page codec {codec}")
