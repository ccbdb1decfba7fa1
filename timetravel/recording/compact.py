"""Keeping a recording within a byte budget (``--max-record-bytes``): thinning what it kept of the past.

A torch recording keeps the training state of some steps (torch/world/state_pull.py); everything else
in it — events, journal, skeleton snapshots — is what a seek and a replay need. Each kept state is
written in BLOBS frames of its own (a *group*: ``RecordingWriter.group``; a page it shares with
another group is written again in it, so that groups do not lean on each other). When the file
grows past the budget, the recorder drops whole groups, rr-style — never the newest nor the last
state, and first the one whose loss leaves the smallest gap for its age, so what stays is dense near
the end and sparse further back — by copying the file without their frames to a new one, renamed
over it (:func:`drop_groups`; a reader that had the old file open reads it to its end). A state
whose pages are gone restores as elided arrays, rebuilt by re-execution like any other step's.

The copy is done by the writer's own thread, between two writes, so the frames keep their order and
a crash leaves either file whole. It costs a copy of the file, and the budget is applied with room
to spare (to BUDGET_FILL of it), so that a long run compacts now and then, not at every state.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from typing import Any

from timetravel.recording.format import FRAME_HEADER, FRAME_HEADER_BYTES, MAGIC
from timetravel.recording.lock import hold_writer_lock

COPY_CHUNK_BYTES = 8 * 1024 * 1024
"""Bytes copied at a time from the old file to the compacted one."""
BUDGET_FILL = 0.8
"""A compaction thins until the file is at most this fraction of the budget."""
FINAL_GROUP = "final"
"""The group of a run's last state: never dropped (dense where failures are)."""


def victims(groups: list[str], sizes: dict[str, int], over_bytes: int) -> list[str]:
    """Which groups to drop to free ``over_bytes``: never the newest or FINAL_GROUP, and first the one
    whose loss leaves the smallest gap relative to its age (groups are in order; their positions
    stand for their steps)."""
    order = {name: position for position, name in enumerate(groups)}
    kept = list(groups)
    dropped: list[str] = []
    freed = 0
    while freed < over_bytes:
        candidates = [index for index in range(len(kept) - 1) if kept[index] != FINAL_GROUP]
        if not candidates:
            break
        chosen = min(candidates, key=lambda index: _gap_for_age(order, kept, index))
        name = kept.pop(chosen)
        dropped.append(name)
        freed += sizes.get(name, 0)
    return dropped


def _gap_for_age(order: dict[str, int], kept: list[str], index: int) -> float:
    """The gap dropping ``kept[index]`` leaves between its neighbours, over its age."""
    before = order[kept[index - 1]] if index else -1
    newest = order[kept[-1]]
    return (order[kept[index + 1]] - before) / max(newest - order[kept[index]], 1)


def drop_groups(writer: Any, names: list[str]) -> int:
    """Rewrite ``writer``'s file without the frames of groups ``names``; the bytes freed. The writer
    then appends to the new file (the same path)."""
    writer.flush_blobs()
    dropped = {offset for name in names for offset in writer.groups.pop(name, [])}
    if not dropped:
        return 0
    writer.file.flush()
    frames = _frame_lengths(writer)
    temporary = writer.path.with_name(writer.path.name + ".compact")
    descriptor = os.open(temporary, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
    new_file = os.fdopen(descriptor, "r+b")
    try:
        hold_writer_lock(new_file, temporary)
        new_offset = _copy_kept(writer.file, new_file, frames, dropped)
        new_file.flush()
        os.fsync(new_file.fileno())
        os.replace(temporary, writer.path)
    except BaseException:
        new_file.close()
        _remove_quietly(temporary)
        raise
    freed = writer.offset - new_file.tell()
    writer.catalog.moved(new_offset, writer.blob_frames)
    writer.moved_to(new_file, new_offset)
    return freed


def _frame_lengths(writer: Any) -> list[tuple[int, int]]:
    """(offset, length with header) of every frame written, read from their headers."""
    lengths = []
    for offset, _kind in writer.catalog.frames:
        writer.file.seek(offset)
        header = writer.file.read(FRAME_HEADER_BYTES)
        stored = FRAME_HEADER.unpack(header)[3]
        lengths.append((offset, FRAME_HEADER_BYTES + stored))
    writer.file.seek(writer.offset)
    return lengths


def _copy_kept(old: Any, new: Any, frames: list[tuple[int, int]], dropped: set[int]) -> dict[int, int]:
    """Copy the magic and every frame not in ``dropped`` from ``old`` to ``new``; old -> new offsets."""
    new.write(MAGIC)
    new_offset: dict[int, int] = {}
    for offset, length in frames:
        if offset in dropped:
            continue
        new_offset[offset] = new.tell()
        _copy(old, new, offset, length, new.write)
    return new_offset


def _copy(old: Any, new: Any, offset: int, length: int, write: Callable[[bytes], Any]) -> None:
    old.seek(offset)
    left = length
    while left:
        chunk = old.read(min(left, COPY_CHUNK_BYTES))
        if not chunk:
            raise OSError(f"{getattr(old, 'name', 'the recording')}: ends inside a frame being compacted")
        write(chunk)
        left -= len(chunk)


def _remove_quietly(path: Any) -> None:
    with contextlib.suppress(OSError):
        os.remove(path)
