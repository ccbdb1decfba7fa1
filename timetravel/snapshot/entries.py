"""What a snapshot is made of: pages, arrays and blobs, shared between snapshots by reference.

Every stored item sits in a *slot* (a node, a world part, a queue generation, a metric chunk, one
page of one array of one of those) and lives from the snapshot that created it (``birth``) until
the snapshot that replaced it in its slot (``death``, exclusive; None while it is current). An
unchanged slot reuses the previous snapshot's object, so copy-on-write sharing is plain Python
references, and the memory a snapshot really holds can be counted exactly when it is dropped:
an item is freed when no live snapshot index falls in ``[birth, death)`` (see ``store.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OBJECT_OVERHEAD_BYTES = 64
"""Bytes counted per stored item on top of its data (Python object headers, the slot's dicts)."""


class Page:
    """One PAGE_BYTES slice of an array's bytes, named by its xxh3-128 digest; ``data`` None: a page
    of an elided array (sim/elided.py), whose bytes are not kept (a recording does not write it)."""

    __slots__ = ("birth", "data", "death", "digest")

    def __init__(self, digest: bytes, data: bytes | None, birth: int) -> None:
        self.digest = digest
        self.data = data
        self.birth = birth
        self.death: int | None = None

    @property
    def nbytes(self) -> int:
        return (0 if self.data is None else len(self.data)) + OBJECT_OVERHEAD_BYTES


class ArrayEntry:
    """An array inside a blob: dtype name, shape and pages; ``digest`` is kernel's array digest."""

    __slots__ = ("digest", "dtype", "pages", "shape")

    def __init__(self, digest: bytes, dtype: str, shape: tuple[int, ...], pages: tuple[Page, ...]) -> None:
        self.digest = digest
        self.dtype = dtype
        self.shape = shape
        self.pages = pages

    @property
    def page_digests(self) -> list[bytes]:
        return [page.digest for page in self.pages]

    @property
    def elided(self) -> bool:
        """Some page's bytes are not kept: the array restores as an ElidedArray."""
        return any(page.data is None for page in self.pages)


class Blob:
    """A value in *hash form* (msgpack with every array replaced by its digest) and its arrays.

    ``digest`` is xxh3-128 of ``data``, which is exactly the kernel's ``digest(value)``: the blob
    of a node is also its Merkle leaf, and equal states share one blob.
    """

    __slots__ = ("arrays", "birth", "data", "death", "digest")

    def __init__(self, digest: bytes, data: bytes, arrays: tuple[ArrayEntry, ...], birth: int) -> None:
        self.digest = digest
        self.data = data
        self.arrays = arrays
        self.birth = birth
        self.death: int | None = None

    @property
    def nbytes(self) -> int:
        return len(self.data) + OBJECT_OVERHEAD_BYTES * (1 + len(self.arrays))


Item = Page | Blob


@dataclass(frozen=True)
class QueueChunk:
    """Pending events scheduled in one generation: ``seq_low <= seq < seq_high``, sorted by (t, seq).

    An event is scheduled once and only ever leaves the queue, so a chunk of an older generation
    can only shrink: it is reused as it is until one of its events runs. ``events`` are the
    (immutable) Event tuples themselves, ``values`` their digests as integers and ``total`` their
    sum, from which the queue's digest is updated (``World.queue_digest``).
    """

    seq_low: int
    seq_high: int
    events: tuple[Any, ...]
    values: tuple[int, ...]
    total: int
    blob: Blob

    @property
    def count(self) -> int:
        return len(self.events)
