"""Replicas computed together: one batched forward/backward for every rank at the same step.

A rank's bucket is a pure function of its weights' bits, its batch of data and the model config
(:func:`model.local_bucket`). At 10,000 ranks, computing it 10,000 times one by one costs ~80 µs
of numpy overhead each; computing the ranks' buckets as one (ranks x parameters) array costs a
fraction of that. So the first rank whose backward kernel completes at a step computes the
buckets of every rank whose forward/backward for the same step is queued (same generation, phase
``compute``, not down) in one :func:`model.batched_buckets` call, bit for bit the rows each would
compute alone (tests/test_dp_training_collective.py), and keeps the rows in a bounded memo; each
of those ranks takes its row when its own kernel completes, in its own handler, into its own
state. The World sees exactly what it saw before: each rank's bucket appears in its state at its
kernel's completion.

The memo is a cache of a pure function, not simulation state: a row is used only when the rank's
weights hash (xxh3-128 of their bytes), its node name, its batch index and every config key the
bucket depends on are equal to those it was computed for, so a restored snapshot, a branch or
another world in the same process gets the same bits with or without it (it just computes again).
"""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np
import xxhash

from timetravel.scenarios.dp_training import update
from timetravel.scenarios.dp_training.model import batched_buckets, layout_for, local_bucket
from timetravel.scenarios.dp_training.numerics import DTYPES, stack_rows
from timetravel.scenarios.dp_training.numerics import all_finite as numerics_all_finite
from timetravel.sim import Context

MEMO_ROWS_MAX = 65_536
"""Rows kept at most (a batch of every rank, with room for a world or two beside it)."""
BATCH_RANKS_MIN = 2
BUCKET_KEYS = ("params", "dtype", "loss_scale", "data_seed", "ranks", "batch", "batches_per_rank")
"""Config keys a bucket depends on besides the rank's weights and batch."""

_bucket_config = operator.itemgetter(*BUCKET_KEYS)
"""The config values of BUCKET_KEYS as a tuple (one C call per rank and step, not a generator)."""

_memo: dict[str, tuple[tuple[Any, ...], bytes, np.ndarray]] = {}


def _weights_key(weights: np.ndarray) -> bytes:
    """xxh3-128 of the weights' bytes (a C-contiguous array is hashed through its buffer, without
    the three numpy calls of a uint8 view: the same digest, a third of the time). The array itself
    is passed, not ``weights.data``: a memoryview of float16 has a format the buffer protocol
    refuses, a plain buffer request does not care. The digest as 16 bytes, not as an int: building
    a 128-bit int costs the binding two shifts and an add, ~1,900 instructions a call against
    ~500, four times a rank and step (it is only ever compared for equality)."""
    if not weights.flags.c_contiguous:
        weights = np.ascontiguousarray(weights)
    return xxhash.xxh3_128_digest(weights)  # type: ignore[arg-type]


def bucket(state: dict[str, Any], ctx: Context, step: int) -> np.ndarray:
    """This rank's bucket for ``step`` (a writable array no one else holds), from the memo or a
    batched pass.

    A batched row is handed over as it is, a view of its row of the batch, not copied: the rows
    are disjoint, the memo lets go of a row when its rank takes it (and never holds the rank's
    own), so no other rank, world or memo entry can see the row change when its rank changes it
    (a ``grad`` bit flip latched into it). The same bits as a copy in every snapshot and hash, one
    numpy copy (~2,000 instructions) less per rank and step; the batch stays alive while a rank
    holds its row (at 10,000 ranks ~10 MB, as long as the memo held it before).
    """
    config = ctx.world.config
    batch = (step - 1) % config["batches_per_rank"]
    key = (_bucket_config(config), batch)
    entry = _memo.pop(ctx.node, None)
    weights_key = _weights_key(state["weights"])
    if entry is not None and entry[0] == key and entry[1] == weights_key:
        return entry[2]
    peers = _ready_peers(state, ctx)
    layout = layout_for(config["params"])
    dtype = DTYPES[config["dtype"]]
    if len(peers) < BATCH_RANKS_MIN:
        return local_bucket(
            state["weights"],
            state["inputs"][batch],
            state["targets"][batch],
            layout,
            dtype,
            config["loss_scale"],
        )
    nodes = ctx.world.nodes
    states = [nodes[name] for name in peers]
    inputs, targets = _stacked_batches(key[0], peers, states, batch)
    rows = batched_buckets(
        stack_rows([peer["weights"] for peer in states]),
        inputs,
        targets,
        layout,
        dtype,
        config["loss_scale"],
    )
    if len(_memo) + len(peers) > MEMO_ROWS_MAX:
        _memo.clear()
    own = rows[0]
    for name, peer, row in zip(peers, states, rows, strict=True):
        if name == ctx.node:
            own = row
        else:
            _memo[name] = (key, _weights_key(peer["weights"]), row)
    return own


_batches: dict[str, Any] = {}


def _stacked_batches(
    config_key: tuple[Any, ...], peers: list[str], states: list[dict[str, Any]], batch: int
) -> tuple[np.ndarray, np.ndarray]:
    """The peers' inputs and targets of ``batch``, stacked (views into one stack of their whole
    shards, kept while the same peers hold the same shards under the same config).

    A shard is drawn at build time and the scenario never writes it, so at 10,000 ranks every step
    stacked bits it had seen before: 20,000 views of one batch and two concatenations of 10,000
    arrays, ~40 ms a step, memory-bound. The whole shards are stacked once instead (the same number
    of arrays, no views), and each step takes its batch out of the stack. The stack is reused only
    when each peer's shard arrays hash (xxh3-128 of their bytes, as the weights above) to what they
    hashed to when it was made: a shard edited in place, or another world's, is stacked afresh.
    The arrays are read-only (the batched pass only reads them).
    """
    shards = [_weights_key(peer["inputs"]) for peer in states]
    shards.extend([_weights_key(peer["targets"]) for peer in states])
    batches_key = (config_key, peers, shards)
    if _batches.get("key") != batches_key:
        inputs = stack_rows([peer["inputs"] for peer in states])
        targets = stack_rows([peer["targets"] for peer in states])
        inputs.flags.writeable = False
        targets.flags.writeable = False
        _batches["key"] = batches_key
        _batches["arrays"] = (inputs, targets)
    inputs, targets = _batches["arrays"]
    return inputs[:, batch], targets[:, batch]


def _ready_peers(state: dict[str, Any], ctx: Context) -> list[str]:
    """This rank and every rank whose forward/backward of the same step is queued and not memoized."""
    world = ctx.world
    nodes = world.nodes
    down = world.down
    generation = state["generation"]
    step = state["step"]
    peers = []
    for name in world.fabric["ranks"]:
        peer = nodes[name]
        if (
            peer["phase"] == "compute"
            and peer["step"] == step
            and peer["generation"] == generation
            and (name == ctx.node or (name not in _memo and name not in down))
        ):
            peers.append(name)
    return peers


def clear() -> None:
    """Forget every memoized row, verdict and update (tests; nothing else needs it)."""
    _memo.clear()
    _batches.clear()
    _verdicts.clear()
    _updates.clear()
    _averages.clear()
    _finite.clear()


# -- the update: every replica applies the same all-reduced bucket to the same weights -------------

_verdicts: dict[str, Any] = {}
_updates: dict[str, Any] = {}


# The memo keys below hold an array's dtype object (compared by numpy's dtype equality, a float32
# dtype is one object) rather than ``dtype.str``, which builds a new string at every call: 1.2 us,
# seven times a rank and step at 10,000 ranks.


def _slots_bytes(slots: dict[str, Any]) -> tuple[Any, ...]:
    """The slots as a key: ``(name, dtype, bytes)`` for an array, ``(name, value)`` otherwise. A
    plain loop, not a generator into ``tuple()``: the same tuple, ~40% fewer instructions."""
    key = []
    for name, value in slots.items():
        key.append((name, value.dtype, value.tobytes()) if isinstance(value, np.ndarray) else (name, value))
    return tuple(key)


def inspect(bucket: np.ndarray, grad_skip_norm: float, bucket_bytes: bytes | None = None) -> update.Verdict:
    """:func:`update.inspect`, computed once for a run of ranks that all hold the same bucket.

    The memo keeps one entry, compared byte for byte (not by a digest): every rank of a healthy
    job inspects the same all-reduced bucket one after another, so one entry is all it needs.
    ``bucket_bytes`` is ``bucket.tobytes()`` when the caller has it (it is handed to :func:`apply`
    too: one copy of the bytes for both keys).
    """
    key = (bucket.dtype, bucket.tobytes() if bucket_bytes is None else bucket_bytes, grad_skip_norm)
    if _verdicts.get("key") == key:
        return _verdicts["verdict"]
    verdict = update.inspect(bucket, grad_skip_norm)
    _verdicts["key"] = key
    _verdicts["verdict"] = verdict
    return verdict


def apply(
    weights: np.ndarray,
    slots: dict[str, Any],
    bucket: np.ndarray,
    config: dict[str, Any],
    skip: bool,
    bucket_bytes: bytes | None = None,
) -> tuple[np.ndarray, dict[str, Any]]:
    """:func:`update.apply`, computed once for ranks whose weights, slots and bucket are the same
    bytes (compared exactly); each rank gets its own copies of the new arrays. ``bucket_bytes``:
    ``bucket.tobytes()``, when the caller has it."""
    if skip:
        return update.apply(weights, slots, bucket, config, skip)
    key = (
        _update_config(config),
        weights.dtype,
        weights.tobytes(),
        bucket.dtype,
        bucket.tobytes() if bucket_bytes is None else bucket_bytes,
        _slots_bytes(slots),
    )
    if _updates.get("key") != key:
        _updates["key"] = key
        _updates["result"] = update.apply(weights, slots, bucket, config, skip)
    new_weights, new_slots = _updates["result"]
    return new_weights.copy(), {
        name: value.copy() if isinstance(value, np.ndarray) else value for name, value in new_slots.items()
    }


_averages: dict[str, Any] = {}
_finite: dict[str, Any] = {}


def average(reduced: np.ndarray, ranks: int, dtype_name: str, loss_scale: float) -> np.ndarray:
    """:func:`update.average`, computed once for a run of ranks that hold the same all-reduced sum
    (compared byte for byte, the loss scale by its repr so that -0.0 is not 0.0); each rank gets
    its own copy. At 10,000 ranks: three numpy calls a rank become a byte comparison and a copy.

    At the collective level every member hands in the one read-only sum the fabric's record holds:
    an array that owns its memory and cannot be written keeps its bytes, so when it is the very
    array the entry was made for (the memo holds it: its id is not reused) and the other arguments
    are equal, the entry is used without copying out and comparing its bytes again, or writing the
    loss scale's repr (the sign of -0.0 is compared instead; a NaN scale never matches and is
    computed again, with the same bits).
    """
    frozen = not reduced.flags.writeable and reduced.base is None
    arguments = (ranks, dtype_name, loss_scale, math.copysign(1.0, loss_scale))
    if frozen and _averages.get("source") is reduced and _averages.get("arguments") == arguments:
        same: np.ndarray = _averages["result"]
        return same.copy()
    key = (reduced.dtype, reduced.shape, reduced.tobytes(), ranks, dtype_name, repr(loss_scale))
    if _averages.get("key") != key:
        _averages["key"] = key
        _averages["result"] = update.average(reduced, ranks, dtype_name, loss_scale)
    _averages["source"] = reduced if frozen else None
    _averages["arguments"] = arguments
    result: np.ndarray = _averages["result"]
    return result.copy()


def all_finite(values: np.ndarray) -> bool:
    """:func:`numerics.all_finite`, computed once for a run of ranks whose weights are the same
    bytes (every replica of a healthy job after the same update)."""
    key = (values.dtype, values.shape, values.tobytes())
    if _finite.get("key") != key:
        _finite["key"] = key
        _finite["verdict"] = numerics_all_finite(values)
    verdict: bool = _finite["verdict"]
    return verdict


UPDATE_KEYS = ("optimizer", "lr", "momentum", "dtype")
"""Config keys :func:`update.apply` reads."""
_update_config = operator.itemgetter(*UPDATE_KEYS)
