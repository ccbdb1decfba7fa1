"""Writing a .ttr: frames appended to a file, fsync at snapshots and at close, an index footer.

The writer streams: an event batch is written when the kernel flushes it, a snapshot's new blobs
and its manifest when it is taken, and nothing is kept in memory but the catalog (the digest and
frame offset of every blob, for deduplication and the index footer: about 120 bytes a blob) and
the blobs of the current BLOBS frame (at most BLOB_FRAME_BYTES). Frames are never rewritten; a
crash leaves a file that the reader opens up to its last complete frame. While a writer is open
it holds an flock on the file, which is how readers tell "in progress" from "incomplete"
(recording/lock.py).
"""

from __future__ import annotations

import contextlib
import os
from collections import deque
from pathlib import Path
from typing import IO, Any, NamedTuple

import msgpack
import zstandard

from timetravel.recording.catalog import Catalog
from timetravel.recording.compress_ahead import (
    FRAME_AHEAD_BYTES_MIN,
    FRAMES_AHEAD_RAW_BYTES_MAX,
    CompressAhead,
    Compression,
    stored_payload,
)
from timetravel.recording.events_frame import (
    ZSTD_LEVEL_EVENTS,
    ZSTD_LEVEL_EVENTS_HEAVY,
    events_level,
    pack_events_payload,
)
from timetravel.recording.files import check_output_path, make_parent_folders, partial_path, rename_over
from timetravel.recording.format import (
    BLOB_FRAME_BYTES,
    FRAME_HEADER_BYTES,
    FRAME_RAW_BYTES_MAX,
    MAGIC,
    TRAILER_BYTES,
    FrameType,
    RecordingError,
    pack_frame_header,
    pack_trailer,
    payload_checksum,
)
from timetravel.recording.lock import hold_writer_lock
from timetravel.recording.replace import check_replaceable
from timetravel.recording.schema import schema_for
from timetravel.recording.writeback import start_writeback
from timetravel.sim.encoding import PACKER_BUFFER_BYTES, reusable_packer

SYNC_BYTES_MIN = 64 * 1024 * 1024
"""A snapshot fsyncs only once this many bytes were written since the last fsync (close always does).

Frames are flushed to the OS at every snapshot, so a process that dies keeps everything written up
to its last snapshot (with compression ahead, up to the snapshot before it at worst: the latest
one's frames may still be compressing, and reach the OS with the next frames written); what an
fsync adds is surviving an OS crash or a power cut, and it cost ~10 ms each, 8% of the dp_training
demo's run time at 10 snapshots. After an OS crash the file opens as a
truncated recording up to its last complete frame, as after any cut."""
ZSTD_LEVEL_DEFAULT = 3
ZSTD_LEVEL_BLOBS = -3
"""Snapshot pages (BLOBS frames) are most of what a recording of training state writes, and they
shrink little at any level: bench torch's 955 MB of XOR-shuffled float32 pages (a snapshot every
four Adam steps of a 1.25M-parameter model; every local gradient new) came to 0.908 of their size
at level 1 in 1.19 s, 0.931 at -3 in 0.71 s, 0.948 at -10 in 0.46 s (2026-12-01, load 1.3). Level 3
was 29% of the coordinator's time before the writer thread; -3 keeps most of level 1's saving
(2.5% more bytes) for 60% of its CPU, which the ranks share with the writer thread."""
ZSTD_LEVEL_STATE = ZSTD_LEVEL_DEFAULT
"""A kept training state's pages (a group's BLOBS frames: whole shuffled float pages, written a few
times a run) take level 3, where the level matters: bench torch's 10M-parameter AdamW state at step
100 (40.2 MB per tensor kind) came to 0.863 (parameters), 0.873 (exp_avg), 0.819 (exp_avg_sq) at 3
against 0.938 / 0.976 / 0.831 at -3, for 0.13-0.19 s of CPU per 40 MB against 0.04-0.06 s (unshuffled
floats: 0.90-0.94 at 3). Half a second a kept state, against 15% of its bytes."""
BlobEntry = list[Any]
"""``[digest, kind, codec, base digest or None, element bytes, data]`` (see recording-format.md)."""


class QueuedFrame(NamedTuple):
    """A frame waiting for its compression (compress_ahead.py) before it is written."""

    stored: Compression
    frame_type: FrameType
    raw_length: int
    payload: dict[str, Any]


class RecordingWriter:
    """Appends frames to one recording file. Not thread-safe; one writer per file.

    After ``compress_ahead()`` frames are compressed on a second thread and written in the order
    they were given, when their turn comes (compress_ahead.py): ``frame`` then returns None."""

    def __init__(
        self, file: IO[bytes], path: Path, catalog: Catalog, *, final_path: Path | None = None
    ) -> None:
        self.file = file
        self.path = path
        """The file written: ``final_path``, or its ``.partial`` while it replaces another file."""
        self.final_path = final_path or path
        """The recording's name, as the caller gave it."""
        self.replaces: Path | None = None
        """The file ``close`` renames ``path`` over once the recording is complete (``final_path``,
        or the file it links to), when this recording replaces one (``create(replace=True)``)."""
        self.catalog = catalog
        self.offset = file.tell()
        self.page_depths: dict[bytes, int] = {}
        """XOR chain depth of every float page written (0: stored whole)."""
        self.elided_arrays: set[bytes] = set()
        """Arrays whose header was written while some of their pages were not (elided): their pages
        are written if they come with bytes later (snapshot_frames.write_snapshot)."""
        self.group: str | None = None
        """The group the BLOBS frames written now belong to (a kept state: recording/compact.py)."""
        self.groups: dict[str, list[int]] = {}
        """Group -> the offsets of its BLOBS frames (what dropping it removes)."""
        self.group_bytes: dict[str, int] = {}
        self.blob_frames: dict[bytes, list[int]] = {}
        """A blob written in a group frame -> every frame holding it (it stays where another does)."""
        self.grouped_only: dict[bytes, set[str]] = {}
        """Blobs held only by group frames -> those groups."""
        self._pending: list[BlobEntry] = []
        self._pending_bytes = 0
        self._pending_digests: set[bytes] = set()
        self._compressors = {
            level: zstandard.ZstdCompressor(level=level, write_content_size=True)
            for level in (ZSTD_LEVEL_EVENTS, ZSTD_LEVEL_EVENTS_HEAVY, ZSTD_LEVEL_BLOBS, ZSTD_LEVEL_DEFAULT)
        }
        self.packer = msgpack.Packer(use_bin_type=True, buf_size=PACKER_BUFFER_BYTES)
        """A Packer for small values the writer encodes often (array headers)."""
        self._frame_packer = reusable_packer()
        """Packs frame payloads (``pack``'s bytes) in one buffer kept at the largest frame's size."""
        self.synced_offset = self.offset
        """File offset at the last fsync."""
        self.writeback_offset = self.offset
        """File offset up to which the OS was asked to start writing (writeback.py)."""
        self.closed = False
        self.write_error: BaseException | None = None
        """The write (or compression ahead) that failed: later writes raise it again (the kernel may
        have swallowed it; a frame lost to a failed compression would leave a gap)."""
        self._ahead: CompressAhead | None = None
        self._queued: deque[QueuedFrame] = deque()
        """Frames given but not written yet, in order (only with compress_ahead)."""
        self._queued_raw_bytes = 0
        self._queued_digests: set[bytes] = set()
        """Blobs in queued BLOBS frames (not in the catalog until their frame is written)."""

    @classmethod
    def create(cls, path: str | Path, header: dict[str, Any], *, replace: bool = False) -> RecordingWriter:
        """Start a new recording at ``path`` (missing folders are created). A path that exists is
        refused (replace.py) unless ``replace``: then the recording goes to ``path.partial`` and
        ``close`` renames it over ``path`` (a symlink is followed: the file it names is replaced)."""
        target = Path(path)
        check_output_path(target)
        make_parent_folders(target)
        written, replaces = target, None
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL
        if replace and os.path.lexists(target):
            check_replaceable(target, force=True)  # never over a recording in progress
            replaces = Path(os.path.realpath(target))
            written = partial_path(replaces)
            flags = os.O_RDWR | os.O_CREAT
        try:
            descriptor = os.open(written, flags, 0o666)
        except FileExistsError:
            check_replaceable(target)  # raises the one line naming what the file holds
            raise
        file: IO[bytes] = os.fdopen(descriptor, "r+b")
        try:
            hold_writer_lock(file, written)
        except BaseException:
            file.close()
            raise
        file.truncate(0)
        file.write(MAGIC)
        writer = cls(file, written, Catalog(), final_path=target)
        writer.replaces = replaces
        writer.frame(FrameType.HEADER, header)
        return writer

    @classmethod
    def append(cls, path: str | Path) -> RecordingWriter:
        """Reopen a recording to append frames (a branch): the trailer and any torn tail are cut."""
        from timetravel.recording.reader import RecordingReader

        target = Path(path)
        file = open(target, "r+b")  # noqa: SIM115 - the writer owns the file until close()
        try:
            hold_writer_lock(file, target)  # before reading: no other writer appends meanwhile
            with RecordingReader.open(target) as reader:
                catalog = reader.catalog
                end = reader.frames_end
        except BaseException:
            file.close()
            raise
        # The old INDEX frame (and any torn tail) is cut below: the catalog must not list it, or
        # the new index would name a frame that is no longer there (and the next one at its offset twice).
        catalog.frames = [(offset, kind) for offset, kind in catalog.frames if offset < end]
        file.truncate(end)
        file.seek(end)
        return cls(file, target, catalog)

    # -- frames -----------------------------------------------------------------------------------

    def compress_ahead(self) -> None:
        """Compress every later frame on a second thread (compress_ahead.py says when that pays)."""
        if self._ahead is None and not self.closed:
            self._ahead = CompressAhead(f"timetravel zstd {self.path.name}")

    def frame(
        self, frame_type: FrameType, payload: dict[str, Any], *, level: int = ZSTD_LEVEL_DEFAULT
    ) -> int | None:
        """Write one frame; returns its offset (None: queued, see compress_ahead). ``payload`` is a
        plain-data map."""
        packer = self._frame_packer
        try:
            packer.pack(payload)
            raw = packer.bytes()
        finally:
            packer.reset()
        return self.frame_bytes(frame_type, raw, payload, level=level)

    def frame_bytes(
        self, frame_type: FrameType, raw: bytes, payload: dict[str, Any], *, level: int = ZSTD_LEVEL_DEFAULT
    ) -> int | None:
        """Write a frame whose msgpack payload ``raw`` is already encoded (``payload`` is its value,
        for the catalog); returns its offset, or None when it was queued for compression."""
        self._check_open()
        raw_bytes_max = min(FRAME_RAW_BYTES_MAX, schema_for(frame_type).raw_bytes_max)
        if len(raw) > raw_bytes_max:
            raise RecordingError(
                f"a {frame_type.name} frame of {len(raw)} bytes exceeds {raw_bytes_max} (what a reader accepts)"
            )
        if self._ahead is None:
            return self._write_frame(
                frame_type, stored_payload(self._compressors[level], raw), len(raw), payload
            )
        if len(raw) >= FRAME_AHEAD_BYTES_MIN:
            job = self._ahead.submit(raw, level)
        else:  # not worth the thread (FRAME_AHEAD_BYTES_MIN), but written after the frames before it
            job = Compression(raw, level)
            job.settle(stored_payload(self._compressors[level], raw))
        self._queued.append(QueuedFrame(job, frame_type, len(raw), payload))
        self._queued_raw_bytes += len(raw)
        self._write_queued(wait=False)
        return None

    def _check_open(self) -> None:
        if self.closed:
            if self.write_error is not None:
                raise self.write_error
            raise RecordingError(f"{self.path}: the recording is closed")

    def _write_frame(
        self,
        frame_type: FrameType,
        stored_form: tuple[bytes, int],
        raw_length: int,
        payload: dict[str, Any],
    ) -> int:
        stored, flags = stored_form
        offset = self.offset
        header = pack_frame_header(frame_type, flags, len(stored), raw_length, payload_checksum(stored))
        try:
            self.file.write(header)
            self.file.write(stored)
        except OSError as error:
            raise self._failed(error) from None
        self.offset += FRAME_HEADER_BYTES + len(stored)
        self.catalog.add(offset, frame_type, payload)
        return offset

    def _write_queued(self, *, wait: bool) -> None:
        """Write the queued frames whose compression is done, in order; ``wait``: all of them. Waits
        for the oldest too while more than FRAMES_AHEAD_RAW_BYTES_MAX raw bytes are queued."""
        queued = self._queued
        while queued and (
            wait or self._queued_raw_bytes > FRAMES_AHEAD_RAW_BYTES_MAX or queued[0].stored.done()
        ):
            frame = queued.popleft()
            self._queued_raw_bytes -= frame.raw_length
            self._check_open()
            try:
                stored_form = frame.stored.result()
            except BaseException as error:  # no frame may be written after a lost one
                self._failed_compression(error)
                raise
            self._write_frame(frame.frame_type, stored_form, frame.raw_length, frame.payload)
            if frame.frame_type == FrameType.BLOBS:
                self._queued_digests.difference_update(entry[0] for entry in frame.payload["blobs"])

    def events(
        self, branch: str, first: int, events_bytes: bytes, count: int, digest: bytes, *, partial: bool
    ) -> None:
        """An EVENTS frame: events ``first+1 .. first+count`` as the kernel packed them."""
        payload = {"branch": branch, "first": first, "count": count, "digest": digest, "partial": partial}
        self.frame_bytes(
            FrameType.EVENTS,
            pack_events_payload(payload, events_bytes),
            payload,
            level=events_level(events_bytes, count),
        )

    # -- blobs ------------------------------------------------------------------------------------

    def has_blob(self, digest: bytes) -> bool:
        return (
            digest in self.catalog.blobs or digest in self._pending_digests or digest in self._queued_digests
        )

    def blob(self, entry: BlobEntry) -> None:
        """Queue one blob entry; full BLOBS frames are written as they fill."""
        self._pending.append(entry)
        self._pending_digests.add(entry[0])
        self._pending_bytes += len(entry[5]) + 40
        if self._pending_bytes >= BLOB_FRAME_BYTES:
            self.flush_blobs()

    def flush_blobs(self) -> None:
        if self._pending:
            digests = [entry[0] for entry in self._pending]
            previous = {digest: self.catalog.blobs.get(digest) for digest in digests}
            level = ZSTD_LEVEL_BLOBS if self.group is None else ZSTD_LEVEL_STATE
            offset = self.frame(FrameType.BLOBS, {"blobs": self._pending}, level=level)
            if self._ahead is not None:  # queued: the catalog lists them once their frame is written
                self._queued_digests |= self._pending_digests
            self._note_group(digests, previous, offset)
            self._pending = []
            self._pending_digests = set()
            self._pending_bytes = 0

    def _note_group(
        self, digests: list[bytes], previous: dict[bytes, int | None], offset: int | None
    ) -> None:
        """Where the blobs of the frame just written live (groups: recording/compact.py)."""
        group = self.group
        if group is None:
            for digest in digests:
                self.grouped_only.pop(digest, None)
            return
        assert offset is not None, "a group's frames are written at once (no compression ahead)"
        self.groups.setdefault(group, []).append(offset)
        self.group_bytes[group] = self.group_bytes.get(group, 0) + self.offset - offset
        for digest in digests:
            frames = self.blob_frames.setdefault(digest, [])
            before = previous[digest]
            if not frames and before is not None:
                frames.append(before)
            frames.append(offset)
            if before is None or digest in self.grouped_only:
                self.grouped_only.setdefault(digest, set()).add(group)

    def has_blob_for(self, digest: bytes, group: str) -> bool:
        """Whether a blob is written where ``group`` may rely on it: outside any group, or in it."""
        if not self.has_blob(digest):
            return False
        groups = self.grouped_only.get(digest)
        return groups is None or group in groups

    def moved_to(self, file: IO[bytes], new_offset: dict[int, int]) -> None:
        """The file was compacted into ``file`` (recording/compact.py): write on there."""
        old, self.file = self.file, file
        with contextlib.suppress(OSError):
            old.close()
        self.offset = self.synced_offset = self.writeback_offset = file.tell()
        self.groups = {
            group: [new_offset[offset] for offset in offsets if offset in new_offset]
            for group, offsets in self.groups.items()
        }
        frames = {}
        for digest, offsets in self.blob_frames.items():
            kept = [new_offset[offset] for offset in offsets if offset in new_offset]
            if kept:
                frames[digest] = kept
        self.blob_frames = frames
        self.grouped_only = {
            digest: {group for group in groups if group in self.groups}
            for digest, groups in self.grouped_only.items()
            if digest in self.catalog.blobs
        }

    # -- durability -------------------------------------------------------------------------------

    def _failed(self, error: OSError) -> OSError:
        """A write error (no space left, a file size limit) naming the recording. The frames written
        before it stay: the file opens as a truncated recording up to its last complete frame."""
        self.closed = True
        self._queued.clear()
        self._stop_ahead()
        with contextlib.suppress(OSError):
            self.file.close()
        self.write_error = OSError(
            error.errno, f"{error.strerror} (the recording stops at its last complete frame)", str(self.path)
        )
        return self.write_error

    def _failed_compression(self, error: BaseException) -> None:
        self.closed = True
        self.write_error = error
        self._queued.clear()
        with contextlib.suppress(OSError):
            self.file.close()
        self._stop_ahead()

    def sync(self, *, durable: bool = True, wait: bool = True) -> None:
        """Flush to the OS (everything written so far survives the process dying) and fsync (it
        survives an OS crash too); ``durable=False`` fsyncs only once SYNC_BYTES_MIN were written
        since the last fsync (a snapshot: see SYNC_BYTES_MIN). With compression ahead, frames still
        compressing are waited for, unless ``wait=False`` and no fsync is due (a snapshot: they are
        written with the next frames)."""
        self.flush_blobs()
        fsync = durable or self.offset - self.synced_offset >= SYNC_BYTES_MIN
        self._write_queued(wait=wait or fsync)
        try:
            self.file.flush()
            if fsync or self.offset - self.synced_offset >= SYNC_BYTES_MIN:
                os.fsync(self.file.fileno())
                self.synced_offset = self.offset
            else:  # the disk writes while the run goes on: the next fsync waits less (writeback.py)
                start_writeback(
                    self.file.fileno(), self.writeback_offset, self.offset - self.writeback_offset
                )
            self.writeback_offset = self.offset
        except OSError as error:
            raise self._failed(error) from None

    def close(self) -> None:
        """Write the index footer and the trailer, fsync and close."""
        if self.closed:
            return
        self.flush_blobs()
        self._write_queued(wait=True)
        self._stop_ahead()
        index_offset = self.frame(FrameType.INDEX, self.catalog.to_index())
        assert index_offset is not None, "written at once: compression ahead has stopped"
        try:
            self.file.write(pack_trailer(index_offset))
            self.offset += TRAILER_BYTES
            self.file.flush()
            os.fsync(self.file.fileno())
        except OSError as error:
            raise self._failed(error) from None
        if self.replaces is not None:  # complete: it replaces the old file now, under its lock
            try:
                rename_over(self.path, self.replaces)
            except OSError as error:
                self.file.close()
                self.closed = True
                raise OSError(
                    error.errno,
                    f"{error.strerror} (the complete recording is {self.path})",
                    str(self.final_path),
                ) from None
            self.path, self.replaces = self.replaces, None
        self.file.close()
        self.closed = True

    def _stop_ahead(self) -> None:
        if self._ahead is not None:
            self._ahead.stop()
            self._ahead = None
