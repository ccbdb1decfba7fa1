"""Choices: every bit of nondeterminism, drawn from counter-based streams.

A choice is identified by ``(node, site, index)``: the node that draws it, a site label naming
the place in the code ("jitter", "ecmp", "fault.swarm.kinds") and the index of this draw at that
site on that node. Its value is a pure function of ``(seed, branch key, node, site, index)``:
xxh3-64 of the index, keyed by a per-stream base digest. So a stream's state is one integer (its
counter) and lives in the drawing node's own state, which makes it free to snapshot.

Value 0 is the canonical choice of every site: no jitter, canonical order, no fault. That is what
lets a minimizer shrink a failure by pushing choices towards 0, and what overrides use to pin a
choice for replay, branching and shrinking.
"""

from __future__ import annotations

import struct
from typing import Any

import xxhash

CHOICE_COUNTERS_KEY = "_choices"
"""Key of the per-node ``{site: count}`` dict inside each node's state."""
WORLD_STREAM = "_world"
"""Pseudo-node name for choices drawn outside any handler (building a world, drawing faults)."""
CHOICE_BOUND_MAX = 1 << 64

_pack_index = struct.Struct("<Q").pack
_hash64 = xxhash.xxh3_64_intdigest

Overrides = dict[tuple[str, str, int], int]


def stream_base(seed: int, branch_key: int, node: str, site: str) -> int:
    """The 64-bit key of one stream: which seed, which future, which node, which site."""
    return _hash64(f"{seed}\x00{branch_key}\x00{node}\x00{site}".encode())


def draw(base: int, index: int, bound: int) -> int:
    """The ``index``-th value of the stream ``base``, uniform in ``[0, bound)``.

    Lemire's multiply-shift maps the 64-bit hash onto the bound, so a raw 0 maps to 0.
    """
    return (_hash64(_pack_index(index), base) * bound) >> 64


def check_bound(bound: int) -> None:
    if type(bound) is not int or not 0 < bound <= CHOICE_BOUND_MAX:
        raise ValueError(f"a choice bound must be an int in [1, 2**64], got {bound!r}")


def choose_world(world: Any, site: str, bound: int, overrides: Overrides | None = None) -> int:
    """Draw from a world-level stream (for code that runs outside handlers, e.g. at build time)."""
    check_bound(bound)
    counters = world.choices
    index = counters.get(site, 0)
    counters[site] = index + 1
    if overrides:
        value = overrides.get((WORLD_STREAM, site, index))
        if value is not None:
            return value % bound
    return draw(stream_base(world.seed, world.branch_key, WORLD_STREAM, site), index, bound)
