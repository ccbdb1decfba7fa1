"""Which bytes of which storage hold uninitialised memory (rank side, imports torch).

explain's watch of uninitialised parameters (init_watch.py) keeps, per storage, the byte ranges that
nothing wrote since they were allocated by an ``empty`` op (or that a write filled from such bytes),
each with the index of its *origin* (where the memory was allocated). A tensor is a view: its bytes
are ``[storage_offset, storage_offset + extent)`` times its element size in its storage. A storage is
keyed by its data pointer; an allocation seen later at the same address resets its ranges, so memory
freed and reused is never mistaken for the old tensor's.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

import torch

RANGES_MAX = 200_000
"""Byte ranges kept over every storage; past it the watch stops (and says so) rather than guess."""


@dataclass(frozen=True)
class Extent:
    """Where a tensor's bytes lie: storage ``key`` (its data pointer), ``[start, end)`` in bytes, and
    whether every byte of that span belongs to the tensor (``dense``: a write covers all of it)."""

    key: int
    start: int
    end: int
    dense: bool


def extent(tensor: object) -> Extent | None:
    """The bytes of ``tensor`` (a DTensor's local shard), None for no memory (meta, empty, a tensor
    subclass without storage)."""
    local = getattr(tensor, "_local_tensor", tensor)
    if not isinstance(local, torch.Tensor) or local.is_meta or local.numel() == 0:
        return None
    try:
        key = local.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError, TypeError):
        return None
    if key == 0:
        return None
    size = int(local.element_size())
    span = 1 + sum(
        int(length - 1) * abs(int(step)) for length, step in zip(local.shape, local.stride(), strict=True)
    )
    start = int(local.storage_offset()) * size
    return Extent(key, start, start + span * size, span == local.numel())


def overlaps(first: Extent | None, second: Extent | None) -> bool:
    """Whether two tensors share a byte of memory."""
    if first is None or second is None or first.key != second.key:
        return False
    return first.start < second.end and second.start < first.end


class MemoryRanges:
    """Per storage key, sorted disjoint ``[start, end, origin]`` ranges of uninitialised bytes."""

    def __init__(self) -> None:
        self.ranges: dict[int, list[list[int]]] = {}
        self.count = 0
        self.overflowed = False

    def origin(self, where: Extent) -> int | None:
        """The origin of the first uninitialised byte inside ``where`` (None: all written)."""
        ranges = self.ranges.get(where.key)
        if not ranges:
            return None
        position = max(bisect.bisect_right(ranges, [where.start, -1, -1]) - 1, 0)
        for start, end, origin in ranges[position:]:
            if start >= where.end:
                return None
            if end > where.start:
                return origin
        return None

    def uninitialised_bytes(self, where: Extent) -> int:
        """How many bytes inside ``where`` are uninitialised."""
        total = 0
        for start, end, _origin in self.ranges.get(where.key, []):
            total += max(0, min(end, where.end) - max(start, where.start))
        return total

    def set(self, where: Extent, origin: int | None) -> None:
        """``where`` now holds uninitialised bytes of ``origin`` (None: written, initialised). A write
        through a sparse view (not ``dense``) initialises nothing: it may have left holes."""
        if origin is None and not where.dense:
            return
        kept = []
        for start, end, previous in self.ranges.get(where.key, []):
            if end <= where.start or start >= where.end:
                kept.append([start, end, previous])
                continue
            if start < where.start:
                kept.append([start, where.start, previous])
            if end > where.end:
                kept.append([where.end, end, previous])
        if origin is not None:
            kept.append([where.start, where.end, origin])
        kept.sort()
        self.count += len(kept) - len(self.ranges.get(where.key, []))
        if kept:
            self.ranges[where.key] = kept
        else:
            self.ranges.pop(where.key, None)
        if self.count > RANGES_MAX:
            self.overflowed = True
