"""Restoring a snapshot: the World it was taken of, decoded from its blobs, its hash checked."""

from __future__ import annotations

from typing import Any

import numpy as np

from timetravel.sim.elided import ElidedArray
from timetravel.sim.encoding import DECODE_BYTES_MAX
from timetravel.sim.world import World
from timetravel.snapshot.assemble import assemble_world
from timetravel.snapshot.changes import SnapshotError
from timetravel.snapshot.codec import build_array, decode_value
from timetravel.snapshot.entries import ArrayEntry, Blob
from timetravel.snapshot.store import Snapshot


def _array_factory(arrays: tuple[ArrayEntry, ...], *, writeable: bool) -> Any:
    by_digest = {array.digest: array for array in arrays}

    def factory(array_digest: bytes) -> np.ndarray | ElidedArray:
        array = by_digest[array_digest]
        pages = [page.data for page in array.pages]
        if any(page is None for page in pages):  # taken elided (codec.Capture): digests only
            return ElidedArray(array.dtype, array.shape, tuple(array.page_digests))
        return build_array(array.dtype, array.shape, pages, writeable=writeable)  # type: ignore[arg-type]

    return factory


def decode_blob(blob: Blob, *, writeable: bool = True) -> Any:
    """The value a blob holds, with fresh arrays (read-only ones for event payloads)."""
    return decode_value(
        blob.data, _array_factory(blob.arrays, writeable=writeable), bytes_max=DECODE_BYTES_MAX
    )


def restore(snapshot: Snapshot, *, verify: bool = True) -> World:
    """A new World equal to the one snapshotted; with ``verify``, its state hash is checked."""
    parts = {name: decode_blob(blob) for name, blob in snapshot.parts.items()}
    nodes = {name: decode_blob(blob) for name, blob in snapshot.nodes.items()}
    events: list[Any] = []
    for chunk in snapshot.queue:
        events.extend(decode_blob(chunk.blob, writeable=False))
    metrics: dict[str, list[Any]] = {}
    for name, (_length, chunks) in snapshot.metrics.items():
        series: list[Any] = []
        for chunk_blob in chunks:
            series.extend(decode_blob(chunk_blob))
        metrics[name] = series
    open_batch = list(snapshot.chain_open)
    world = assemble_world(
        parts,
        nodes,
        events,
        metrics,
        (snapshot.chain_digest, snapshot.chain_events, open_batch),
        snapshot.display_unit,
    )
    if verify and world.state_hash() != snapshot.state_hash:
        raise SnapshotError(
            f"snapshot {snapshot.index} (event #{snapshot.events}) restored to state "
            f"{world.state_hash()}, recorded {snapshot.state_hash}"
        )
    return world
