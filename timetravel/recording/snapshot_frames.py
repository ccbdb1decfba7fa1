"""What the recorder's writer thread writes for a snapshot: its new blobs (float pages as XOR
deltas) and then its MANIFEST frame; the pages of the training states a recording keeps
(``write_pulled``); and the file kept under ``--max-record-bytes`` by dropping kept states
(``within_budget``, recording/compact.py). recording/recorder.py queues them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from timetravel.recording.compact import BUDGET_FILL, drop_groups, victims
from timetravel.recording.format import (
    BLOB_ARRAY,
    BLOB_PAGE,
    BLOB_VALUE,
    FRAME_HEADER_BYTES,
    TRAILER_BYTES,
    FrameType,
)
from timetravel.recording.writer import RecordingWriter
from timetravel.sim.encoding import PAGE_BYTES, dtype_name, pack, page_digests
from timetravel.snapshot.codec import XOR_CHAIN_MAX, element_bytes, encode_page
from timetravel.snapshot.entries import Blob, Item, Page


def write_snapshot(
    writer: RecordingWriter,
    new_items: list[Item],
    bases: dict[int, Page],
    manifest: dict[str, Any],
    open_chunks: list[tuple[bytes, bytes]],
) -> None:
    """Write the blobs a snapshot created (float pages as XOR deltas against ``bases``) and the chunks
    of the open chain batch it names that are new (open_batch.py), then its MANIFEST frame, and flush them to the OS (fsync every SYNC_BYTES_MIN and at close:
    writer.SYNC_BYTES_MIN says why; frames still compressing ahead are written with the next ones).

    Blobs always precede the manifest that names them, so a file cut anywhere never holds a
    manifest whose blobs are missing."""
    for item in new_items:
        if isinstance(item, Blob):
            _write_blob(writer, item, bases)
    for digest, data in open_chunks:
        if not writer.has_blob(digest):
            writer.blob([digest, BLOB_VALUE, 0, None, 0, data])
    writer.flush_blobs()
    writer.frame(FrameType.MANIFEST, manifest)
    writer.sync(durable=False, wait=False)


def _write_blob(writer: RecordingWriter, blob: Blob, bases: dict[int, Page]) -> None:
    for array in blob.arrays:
        if writer.has_blob(array.digest) and array.digest not in writer.elided_arrays:
            continue
        missing = False
        for page in array.pages:
            if writer.has_blob(page.digest):
                continue
            if page.data is None:  # an elided page (sim/elided.py): rebuilt by re-execution
                missing = True
                continue
            base = bases.get(id(page))
            depth = writer.page_depths.get(base.digest) if base is not None else None
            base_data = (
                base.data if base is not None and depth is not None and depth < XOR_CHAIN_MAX else None
            )
            codec, data = encode_page(page.data, array.dtype, base_data)
            if base_data is not None and base is not None and depth is not None:
                writer.page_depths[page.digest] = depth + 1
                base_digest: bytes | None = base.digest
            else:
                writer.page_depths[page.digest] = 0
                base_digest = None
            writer.blob([page.digest, BLOB_PAGE, codec, base_digest, element_bytes(array.dtype), data])
        if missing:
            writer.elided_arrays.add(array.digest)
        else:
            writer.elided_arrays.discard(array.digest)
        if not writer.has_blob(array.digest):
            header = writer.packer.pack([array.dtype, list(array.shape), array.page_digests])
            writer.blob([array.digest, BLOB_ARRAY, 0, None, 0, header])
    if not writer.has_blob(blob.digest):
        writer.blob([blob.digest, BLOB_VALUE, 0, None, 0, blob.data])


def write_pulled(writer: RecordingWriter, pulled: list[np.ndarray], group: str) -> None:
    """The pages of arrays the World holds elided and this recording keeps (the recorder's ``pulls``),
    each stored whole (shuffled, never an XOR delta: a kept state may be thinned away later, and a
    delta against a state many steps apart saves little), in frames of their own: ``group``
    (recording/compact.py), which leans on no other group."""
    writer.flush_blobs()
    writer.group = group
    try:
        for array in pulled:
            name = dtype_name(array.dtype)
            raw = memoryview(np.ascontiguousarray(array).reshape(-1).view(np.uint8).data)
            for digest, start in zip(
                page_digests(array), range(0, max(len(raw), 1), PAGE_BYTES), strict=True
            ):
                if writer.has_blob_for(digest, group):
                    continue
                codec, data = encode_page(bytes(raw[start : start + PAGE_BYTES]), name, None)
                writer.blob([digest, BLOB_PAGE, codec, None, element_bytes(name), data])
        writer.flush_blobs()
    finally:
        writer.group = None


def within_budget(writer: RecordingWriter, budget: int, notes: list[str], *, closing: bool = False) -> None:
    """Drop kept states, oldest gaps first, while the file is over ``budget`` bytes (compact.py);
    say once when what cannot be dropped is over it alone. ``closing``: the index footer is next,
    and counts (at its size now, which dropping states only makes smaller)."""
    reserve = len(pack(writer.catalog.to_index())) + FRAME_HEADER_BYTES + TRAILER_BYTES if closing else 0
    if writer.offset + reserve <= budget:
        return
    over = writer.offset + reserve - (budget if closing else int(budget * BUDGET_FILL))
    names = victims(list(writer.groups), writer.group_bytes, over)
    if names:
        drop_groups(writer, names)
    if writer.offset + reserve > budget and not any(note.startswith(BUDGET_NOTE) for note in notes):
        notes.append(
            f"{BUDGET_NOTE} {budget} bytes: the run's events and snapshots, and the states it keeps "
            f"last, take {writer.offset} bytes"
        )


BUDGET_NOTE = "the recording is over --max-record-bytes"


__all__ = ["BUDGET_NOTE", "within_budget", "write_pulled", "write_snapshot"]
