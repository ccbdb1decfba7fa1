"""An in-memory copy of a World, kept beside a rank checkpoint so that a seek need not decode it.

Restoring a torch recording's snapshot from the file decodes every array in it: with the training
state in the World (parameters, optimizer moments and local gradients of every rank) that was
1.2 s of a 1.3 s warm seek on a loaded 2-core machine (a 1.25M-parameter model on 4 ranks: 80 MB
of pages to decompress, un-shuffle and un-XOR). The torch world source (world_source.py) keeps a
copy of the World where it keeps a checkpoint at a snapshot point, and hands out copies of that.

A copy shares what cannot change — scalars, strings, bytes, and read-only arrays whose memory is
immutable (a view of ``bytes``, as every tensor a rank sends is: torch/arrays.py ``decode``; or a
frozen array that owns its memory, as ``freeze`` makes) — and copies everything else, so neither the
kept World nor any copy handed out can reach another's mutable state. The World is plain data
(sim/world.py), so this walk is the whole of it.
"""

from __future__ import annotations

import copy
from typing import Any

import numpy as np

from timetravel.sim.event import Event
from timetravel.sim.world import World

_SHARED_TYPES = frozenset({type(None), bool, int, float, str, bytes})


def copy_world(world: World) -> World:
    """A World equal to ``world`` (the same ``state_hash``) that shares no mutable state with it."""
    return World.from_data({name: _copy(value) for name, value in world.to_data().items()})


def _copy(value: Any) -> Any:
    kind = type(value)
    if kind in _SHARED_TYPES:
        return value
    if kind is dict:
        return {key: _copy(item) for key, item in value.items()}
    if kind is list:
        return [_copy(item) for item in value]
    if kind is Event:
        return Event(*(_copy(item) for item in value))
    if kind is tuple:
        return tuple(_copy(item) for item in value)
    if kind is np.ndarray:
        return value if immutable(value) else value.copy()
    return copy.deepcopy(value)  # anything else (a numpy scalar): copied whole


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
        base = base.base
    return isinstance(base, bytes)


def world_bytes(world: World) -> int:
    """The bytes of the arrays and byte strings the World's nodes and events hold (an estimate of
    what a kept copy costs: shared memory counts too, as the live World soon lets go of it)."""
    return _bytes(world.nodes) + _bytes(world.queue)


def _bytes(value: Any) -> int:
    kind = type(value)
    if kind is np.ndarray:
        return int(value.nbytes)
    if kind is bytes:
        return len(value)
    if kind is dict:
        return sum(_bytes(item) for item in value.values())
    if kind in (list, tuple, Event):
        return sum(_bytes(item) for item in value)
    return 0
