"""A recording's blobs: the values, arrays and pages its snapshots are made of, each checked against
its digest as it is read, through bounded caches (the rules: recording/reader.py's docstring).

:class:`BlobReader` is the middle of :class:`~timetravel.recording.reader.RecordingReader`: over
its frames (:class:`~timetravel.recording.frame_reader.FrameReader`) it reads BLOBS frames, resolves
XOR-chained pages, builds arrays (an :class:`~timetravel.sim.elided.ElidedArray` where the recording
kept only the digests) and decodes values; the reader above it adds events, manifests and restores.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import IO, Any

import msgpack
import numpy as np
import xxhash

from timetravel.recording import speedups
from timetravel.recording.catalog import check_blob_entry
from timetravel.recording.format import (
    BLOB_ARRAY,
    BLOB_PAGE,
    BLOB_VALUE,
    FRAME_RAW_BYTES_MAX,
    FrameType,
    RecordingError,
)
from timetravel.recording.frame_reader import FrameReader, items_max_for
from timetravel.sim.elided import ElidedArray
from timetravel.sim.encoding import DecodeError, array_digest_from_pages
from timetravel.snapshot.codec import (
    XOR_CHAIN_MAX,
    build_array,
    decode_page,
    decode_value_against,
    decode_value_sized,
    fresh_copy,
)

FRAME_CACHE_BYTES_MAX = 128 * 1024 * 1024
"""Decoded BLOBS and EVENTS frames kept for later seeks."""
PAGE_CACHE_BYTES_MAX = 256 * 1024 * 1024
"""Decoded array pages kept for later seeks."""
DECODED_PART_BYTES_MAX = 64 * 1024 * 1024
"""Decoded world parts kept read-only, by digest, for restores to copy (estimated bytes: 6x the
blob, as recording/shared_nodes.py estimates). Every restore needs its parts afresh (a handler may
change them), and at 10,000 ranks the fabric part holds 180,000 ints: decoding them took ~20 ms a
seek, copying a kept decode (snapshot/codec.py ``fresh_copy``) takes ~1 ms; most snapshots of a
run share their parts' digests."""
ARRAY_HEADER_BYTES_MAX = 16 * 1024 * 1024
ARRAY_HEADER_CACHE_BYTES_MAX = 64 * 1024 * 1024
ARRAY_CACHE_BYTES_MAX = 256 * 1024 * 1024
"""Built arrays kept (read-only, by digest) so that a restore copies them instead of rebuilding
them from header and pages. A 10,000-rank dp_training snapshot holds 220,000 small arrays, most
of them (data shards, unchanged slots) the same from one snapshot to the next; rebuilding each
(header lookup, page lookups, shape check, frombuffer) was half of a seek's time."""
VALUE_ITEMS_MAX = 4_000_000
"""Containers and entries one stored value (a node state, a part) may decode to."""


_blob_entries = getattr(speedups.compiled, "blob_entries", None)
"""The compiled check of a BLOBS frame's entries (recording/_speedups.c; None: catalog's, in Python)."""


class ByteLRU:
    """A least-recently-used cache bounded by the bytes of its values."""

    def __init__(self, bytes_max: int) -> None:
        self.bytes_max = bytes_max
        self.bytes_held = 0
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self.items: dict[Any, tuple[Any, int]] = self._items
        """{key: (value, nbytes)}, to read without refreshing the LRU order (the compiled decoder's
        array look-ups: reader.value_sized)."""

    def get(self, key: Any) -> Any:
        item = self._items.get(key)
        if item is None:
            return None
        self._items.move_to_end(key)
        return item[0]

    def put(self, key: Any, value: Any, nbytes: int) -> None:
        if key in self._items:
            return
        self._items[key] = (value, nbytes)
        self.bytes_held += nbytes
        while self.bytes_held > self.bytes_max and len(self._items) > 1:
            _key, (_value, size) = self._items.popitem(last=False)
            self.bytes_held -= size


class BlobReader(FrameReader):
    """The blobs of an open recording (see the module docstring)."""

    def __init__(self, path: Path, file: IO[bytes], recording_bytes_max: int | None = None) -> None:
        super().__init__(path, file, recording_bytes_max)
        self._frames = ByteLRU(FRAME_CACHE_BYTES_MAX)
        self._pages = ByteLRU(PAGE_CACHE_BYTES_MAX)
        self._array_headers = ByteLRU(ARRAY_HEADER_CACHE_BYTES_MAX)
        self._arrays = ByteLRU(ARRAY_CACHE_BYTES_MAX)
        self._decoded_parts = ByteLRU(DECODED_PART_BYTES_MAX)
        self._array_bytes = 0
        """Bytes of the arrays the value being decoded holds (value_sized)."""

    def _blob(self, digest: bytes) -> tuple[bytes, int, int, bytes | None, int, bytes]:
        offset = self.catalog.blobs.get(digest)
        if offset is None:
            raise RecordingError(f"{self.path}: blob {digest.hex()} is missing (the recording is incomplete)")
        key = ("blobs", offset)
        entries = self._frames.get(key)
        if entries is None:
            payload = self._payload(offset, FrameType.BLOBS)
            raw_entries = payload.get("blobs")
            if not isinstance(raw_entries, list):
                raise RecordingError(f"{self._where(offset, None, FrameType.BLOBS)}: no blob list")
            checked = NotImplemented if _blob_entries is None else _blob_entries(raw_entries)
            if checked is not NotImplemented:
                entries, size = checked
            else:
                entries = {}
                size = 0
                for raw in raw_entries:
                    entry = check_blob_entry(raw)
                    entries[entry[0]] = entry
                    size += len(entry[5]) + 100
            self._frames.put(key, entries, size)
        entry = entries.get(digest)
        if entry is None:
            raise RecordingError(
                f"{self._where(offset, None, FrameType.BLOBS)}: blob {digest.hex()} is not in it"
            )
        return entry

    def value_bytes(self, digest: bytes) -> bytes:
        """A hash-form value blob, checked against its digest."""
        _digest, kind, _codec, _base, _itemsize, data = self._blob(digest)
        if kind != BLOB_VALUE or xxhash.xxh3_128_digest(data) != digest:
            raise RecordingError(f"{self.path}: value blob {digest.hex()} does not match its digest")
        return data

    def page(self, digest: bytes, depth: int = 0) -> bytes:
        """A page's bytes: XOR chains resolved, checked against its digest, cached."""
        cached = self._pages.get(digest)
        if cached is not None:
            return cached
        if depth > XOR_CHAIN_MAX:
            raise RecordingError(
                f"{self.path}: page {digest.hex()} has an XOR chain longer than {XOR_CHAIN_MAX}"
            )
        _digest, kind, codec, base_digest, itemsize, data = self._blob(digest)
        if kind != BLOB_PAGE:
            raise RecordingError(f"{self.path}: blob {digest.hex()} is not a page")
        base = self.page(base_digest, depth + 1) if base_digest is not None else None
        try:
            page = decode_page(codec, data, itemsize, base)
        except DecodeError as error:
            raise RecordingError(f"{self.path}: page {digest.hex()}: {error}") from None
        if xxhash.xxh3_128_digest(page) != digest:
            raise RecordingError(f"{self.path}: page {digest.hex()} does not match its digest")
        self._pages.put(digest, page, len(page) + 100)
        return page

    def array_header(self, digest: bytes) -> tuple[str, list[int], list[bytes]]:
        """(dtype name, shape, page digests) of an array, checked and cached."""
        cached = self._array_headers.get(digest)
        if cached is not None:
            return cached
        _digest, kind, _codec, _base, _itemsize, data = self._blob(digest)
        if kind != BLOB_ARRAY:
            raise RecordingError(f"{self.path}: blob {digest.hex()} is not an array")
        try:
            # msgpack's own decoder: a header is [str, [int...], [bin16...]], checked at once (a deeper
            # value, up to msgpack's fixed stack, is refused here: nothing walks it recursively), so
            # it needs no depth-bounded decode's scan (~10,000 headers on a first seek at 10,000 ranks)
            dtype, shape, pages = msgpack.unpackb(data, raw=False, max_bin_len=ARRAY_HEADER_BYTES_MAX)
            if not isinstance(dtype, str) or not isinstance(shape, list) or not isinstance(pages, list):
                raise DecodeError("array header fields have the wrong types")
            for length in shape:  # a loop, not all(...): ~10,000 headers a first seek at 10,000 ranks
                if type(length) is not int:
                    raise DecodeError("an array header's shape is not a list of integers")
            if array_digest_from_pages(dtype, shape, pages) != digest:
                raise DecodeError("array header does not match its digest")
        except (ValueError, TypeError, DecodeError, msgpack.UnpackException) as error:
            raise RecordingError(f"{self.path}: array {digest.hex()}: {error}") from None
        header = (dtype, shape, pages)
        kept_untracked(header)
        self._array_headers.put(digest, header, 100 + 16 * len(pages))
        return header

    def array(self, digest: bytes, *, writeable: bool = True) -> np.ndarray | ElidedArray:
        """The array a digest names: a copy of the cached read-only array (``writeable=False``: the
        cached array itself, which nobody can write). An array whose pages the recording did not
        store (format 1.2: a torch recording keeps large tensors as digests, rebuilt by
        re-execution) is an :class:`~timetravel.sim.elided.ElidedArray`."""
        built = self._arrays.get(digest)
        if built is None:
            dtype, shape, pages = self.array_header(digest)
            blobs = self.catalog.blobs
            for page in pages:  # a loop, not all(...): most arrays are one page, and a first seek
                if page not in blobs:  # at 10,000 ranks builds ~20,000 of them
                    return ElidedArray(dtype, shape, tuple(pages))
            try:
                built = build_array(dtype, shape, [self.page(page) for page in pages], writeable=False)
            except DecodeError as error:
                raise RecordingError(f"{self.path}: array {digest.hex()}: {error}") from None
            self._arrays.put(digest, built, built.nbytes + 100)
        return built.copy() if writeable else built

    def value(self, digest: bytes, *, writeable: bool = True, untracked: bool = False) -> Any:
        """The plain-data value a blob holds, arrays rebuilt from their pages (``untracked``: its
        containers built out of the cyclic collector's reach, ``decode_value_sized``)."""
        return self.value_sized(digest, writeable=writeable, untracked=untracked)[0]

    def value_sized(
        self,
        digest: bytes,
        *,
        writeable: bool = True,
        shared: dict[bytes, Any] | None = None,
        untracked: bool = False,
    ) -> tuple[Any, int, int]:
        """:meth:`value`, the length of its stored blob and the bytes of the arrays in it (what a
        cache of decoded values weighs).

        ``shared`` (read-only values only, ``writeable=False``): a dict the caller keeps across
        decodes, in which the compiled decoder shares the value's small containers with the other
        values decoded with it, out of the garbage collector's reach (snapshot/codec.py
        ``decode_value_sized``; recording/shared_nodes.py). The arrays come from the array cache
        without a Python call where it holds them (copied when ``writeable``); such hits do not
        refresh their place in the cache's LRU order, which changes what is kept, never a value."""
        self._array_bytes = 0
        try:
            data = self.value_bytes(digest)
            factory = self._array_copy if writeable else self._array_shared
            value, cached_bytes = decode_value_sized(
                data,
                factory,
                bytes_max=FRAME_RAW_BYTES_MAX,
                items_max=items_max_for(len(data), VALUE_ITEMS_MAX),
                arrays=self._arrays.items,
                copy_arrays=writeable,
                shared=None if writeable else shared,
                untracked=untracked,
            )
        except DecodeError as error:
            raise RecordingError(f"{self.path}: value {digest.hex()}: {error}") from None
        return value, len(data), self._array_bytes + cached_bytes

    def shared_values(
        self, digests: list[bytes], shared: dict[bytes, Any], base: tuple[bytes, Any] | None
    ) -> tuple[list[tuple[Any, int, int]], tuple[bytes, Any] | None]:
        """:meth:`value_sized` (read-only, with ``shared``) of each digest, in one loop, each value
        decoded against the one before it (``base``: the ``(bytes, value)`` of the value decoded
        before the first, or None; snapshot/codec.py ``decode_value_against``); also the last
        ``(bytes, value)``, to pass as the next call's base. Every blob is checked against its
        digest, as :meth:`value_bytes` does. Why one loop: a first seek into a 10,000-rank snapshot
        decodes 10,000 node states, and the five calls a state took on the way to the decoder cost
        more than decoding it against its neighbour."""
        results: list[tuple[Any, int, int]] = []
        offsets = self.catalog.blobs
        frames: dict[int, dict[bytes, Any]] = {}  # this call's BLOBS frames, by offset
        arrays = self._arrays.items
        factory = self._array_shared
        digest_of = xxhash.xxh3_128_digest
        for digest in digests:
            entries = frames.get(offsets.get(digest, -1))
            entry = None if entries is None else entries.get(digest)
            if entry is None:
                entry = self._blob(digest)  # raises for a missing blob
                frames[offsets[digest]] = self._frames.get(("blobs", offsets[digest]))
            data = entry[5]
            if entry[1] != BLOB_VALUE or digest_of(data) != digest:
                raise RecordingError(f"{self.path}: value blob {digest.hex()} does not match its digest")
            if items_max_for(len(data), VALUE_ITEMS_MAX) is not None:  # large: counted, as value_sized
                value, blob_bytes, array_bytes = self.value_sized(digest, writeable=False, shared=shared)
            else:
                self._array_bytes = 0
                try:
                    value, cached_bytes = decode_value_against(
                        data, base, factory, bytes_max=FRAME_RAW_BYTES_MAX, arrays=arrays, shared=shared
                    )
                except DecodeError as error:
                    raise RecordingError(f"{self.path}: value {digest.hex()}: {error}") from None
                blob_bytes, array_bytes = len(data), self._array_bytes + cached_bytes
            results.append((value, blob_bytes, array_bytes))
            base = (data, value)
        return results, base

    def fresh_value(self, digest: bytes) -> Any:
        """:meth:`value` (writeable), copied from a kept read-only decode of the same digest when
        snapshot's compiled code can copy it (``DECODED_PART_BYTES_MAX``): the same value, built faster."""
        held = self._decoded_parts.get(digest)
        if held is None:
            if fresh_copy(None) is NotImplemented:  # no compiled copy: decode as always
                return self.value(digest)
            held, blob_bytes, array_bytes = self.value_sized(digest, writeable=False)
            self._decoded_parts.put(digest, held, 100 + 6 * blob_bytes + array_bytes)
        copied = fresh_copy(held)
        if copied is NotImplemented:
            return self.value(digest)
        return copied

    def _array_copy(self, digest: bytes) -> np.ndarray | ElidedArray:
        array = self.array(digest, writeable=True)
        self._array_bytes += 0 if isinstance(array, ElidedArray) else array.nbytes
        return array

    def _array_shared(self, digest: bytes) -> np.ndarray | ElidedArray:
        array = self.array(digest, writeable=False)
        self._array_bytes += 0 if isinstance(array, ElidedArray) else array.nbytes
        return array


def kept_untracked(value: Any) -> None:
    """Take a value the reader keeps read-only in a cache out of the cyclic collector's reach.

    Decoded recording data is acyclic plain data, freed by reference counting alone; but cached, it
    lives long, and every full collection walked it: at 10,000 ranks a manifest's node list is
    10,000 two-item lists and the array headers another 80,000 containers, most of the ~290,000
    tracked objects a full collection during a seek walked (220-370 ms). Without recording's compiled
    code this does nothing (a Python walk would cost what the collector's does)."""
    if speedups.compiled is not None:
        speedups.compiled.untrack(value)


__all__ = ["BlobReader", "ByteLRU", "kept_untracked"]
