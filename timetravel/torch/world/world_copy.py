"""An in-memory copy of a World, kept beside a rank checkpoint so that a seek need not decode it.

Restoring a torch recording's snapshot from the file decodes every array in it: with the training
state in the World (parameters, optimizer moments and local gradients of every rank) that was
1.2 s of a 1.3 s warm seek on a loaded 2-core machine (a 1.25M-parameter model on 4 ranks: 80 MB
of pages to decompress, un-shuffle and un-XOR). The torch world source (world_source.py) keeps a
copy of the World where it keeps a checkpoint at a snapshot point, and hands out copies of that.

A copy shares what cannot change — scalars, strings, bytes, and read-only arrays whose memory is
immutable (a view of ``bytes`` or of a read-only message buffer, as every tensor a rank sends is:
torch/arrays.py ``decode``, torch/wire.py; or a frozen array that owns its memory, as ``freeze``
makes) — and copies everything else, so neither the
kept World nor any copy handed out can reach another's mutable state. The World is plain data
(sim/world.py), so this walk is the whole of it.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np
import xxhash

from timetravel.sim.elided import ElidedArray
from timetravel.sim.event import Event
from timetravel.sim.world import World

_SHARED_TYPES = frozenset({type(None), bool, int, float, str, bytes, ElidedArray})
"""What a copy shares: immutable values (an elided array too: sim/elided.py)."""


DEDUPLICATE_BYTES_MIN = 64 * 1024
"""Immutable arrays at least this large are looked up by content when a World is kept: data-parallel
replicas hold the same parameters and optimizer moments, so a kept copy stores them once (4 ranks of a
1.25M-parameter AdamW run: 92 MB of arrays, of which 45 MB are repeats)."""


def copy_world(world: World, *, deduplicate: bool = False) -> World:
    """A World equal to ``world`` (the same ``state_hash``) that shares no mutable state with it;
    ``deduplicate``: immutable arrays of equal bits become one (a copy that is kept a while)."""
    seen: dict[tuple[str, tuple[int, ...], bytes], list[np.ndarray]] | None = {} if deduplicate else None
    return World.from_data({name: _copy(value, seen) for name, value in world.to_data().items()})


def _copy(value: Any, seen: Any) -> Any:
    kind = type(value)
    if kind in _SHARED_TYPES:
        return value
    if kind is dict:
        return {key: _copy(item, seen) for key, item in value.items()}
    if kind is list:
        return [_copy(item, seen) for item in value]
    if kind is Event:
        return Event(*(_copy(item, seen) for item in value))
    if kind is tuple:
        return tuple(_copy(item, seen) for item in value)
    if kind is np.ndarray:
        if not immutable(value):
            return value.copy()
        return value if seen is None else _once(value, seen)
    return copy.deepcopy(value)  # anything else (a numpy scalar): copied whole


def _once(array: np.ndarray, seen: dict[tuple[str, tuple[int, ...], bytes], list[np.ndarray]]) -> np.ndarray:
    """The first array kept with exactly these bits (dtype, shape and bytes compared), or this one."""
    if array.nbytes < DEDUPLICATE_BYTES_MIN or not array.flags.c_contiguous:
        return array
    raw = array.data.cast("B")
    key = (array.dtype.str, tuple(array.shape), xxhash.xxh3_128_digest(raw))
    for earlier in seen.setdefault(key, []):
        if earlier is array or earlier.data.cast("B") == raw:
            return earlier
    seen[key].append(array)
    return array


def immutable(array: np.ndarray) -> bool:
    """Nobody can change this array's elements: read-only, over ``bytes`` or over memory it owns."""
    if array.flags.writeable:
        return False
    base = array.base
    if base is None:
        return True  # as sim/context.py's freeze: a read-only array owning its data
    while isinstance(base, np.ndarray):
        if base.flags.writeable:
            return False
        if base.base is None:
            return True  # over a read-only array owning its memory: a frame's message buffer (wire.py)
        base = base.base
    return isinstance(base, bytes)


def world_bytes(world: World) -> int:
    """The bytes of the arrays and byte strings the World's nodes and events hold, each array once
    (an estimate of what a kept copy costs: memory shared with the live World counts too, as the
    live World soon lets go of it)."""
    counted: set[int] = set()
    return _bytes(world.nodes, counted) + _bytes(world.queue, counted)


def _bytes(value: Any, counted: set[int]) -> int:
    kind = type(value)
    if kind is np.ndarray:
        if id(value) in counted:
            return 0
        counted.add(id(value))
        return int(value.nbytes)
    if kind is bytes:
        return len(value)
    if kind is dict:
        return sum(_bytes(item, counted) for item in value.values())
    if kind in (list, tuple, Event):
        return sum(_bytes(item, counted) for item in value)
    return 0
