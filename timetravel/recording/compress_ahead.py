"""Compressing a recording's frames on a second core while the run goes on (issue 18 part 6).

**Why.** zstd over the event batches and snapshot pages was the largest single cost of recording
the dp_training demo at the message level: 297 M of the recording's +716 M instructions, 34 MB
of event batches at level -3. python-zstandard releases the GIL while it compresses, and this
machine has two cores, so the compression can run beside the simulation instead of inside it.

**Not in the simulation path.** The thread only turns bytes the recorder's thread already
produced (a packed batch, a BLOBS or MANIFEST payload) into their stored form: zstd, and the
xxh3 checksum of the frame header. It never touches the World, the snapshot store, the catalog or
the file. The writer (writer.py) keeps every frame in a queue in submission order and writes a
frame, on its own thread, only once every frame before it is written, so the file holds the same
frames, in the same order, bit for bit, as when each was compressed inline
(tests/test_recording_compress_ahead.py compares them).

**Unlike write_thread.py** this thread runs no Python worth the name: one C call with the GIL
released, then handing back three values. The writer thread (write_thread.py) runs whole write
jobs — XOR-encoding pages, packing, catalog updates — in Python, and beside a kernel that keeps
its own thread busy in Python that only contended for the GIL, which is why plain-data worlds
write inline and compress here.

**Bounded.** The writer waits for the oldest frame once FRAMES_AHEAD_RAW_BYTES_MAX bytes wait to
be compressed, so a slow second core slows the run instead of holding the batches in memory.

**Failures.** A compression that raises is raised on the writer's thread when its frame's turn to
be written comes (the next frame written, a sync or close); the frames before it are written.
"""

from __future__ import annotations

import concurrent.futures

import zstandard

from timetravel.recording.format import FLAG_ZSTD, payload_checksum

FRAMES_AHEAD_RAW_BYTES_MAX = 16 * 1024 * 1024
"""Raw bytes queued for compression before the writer waits: ~8 message-level batches of the demo."""


def stored_payload(compressor: zstandard.ZstdCompressor, raw: bytes) -> tuple[bytes, int, int]:
    """A frame payload as stored: (bytes, flags, xxh3 checksum); raw when zstd does not shrink it."""
    stored = compressor.compress(raw)
    if len(stored) >= len(raw):
        return raw, 0, payload_checksum(raw)
    return stored, FLAG_ZSTD, payload_checksum(stored)


class CompressAhead:
    """One thread that compresses frame payloads in submission order. See the module docstring."""

    def __init__(self, name: str) -> None:
        self._executor = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix=name)
        self._compressors: dict[int, zstandard.ZstdCompressor] = {}
        """Used only on the thread (a ZstdCompressor is not for two threads at once)."""

    def submit(self, raw: bytes, level: int) -> concurrent.futures.Future[tuple[bytes, int, int]]:
        return self._executor.submit(self._compress, raw, level)

    def stop(self) -> None:
        """End the thread once what was submitted ran (the writer waited for it already)."""
        self._executor.shutdown(wait=True)

    def _compress(self, raw: bytes, level: int) -> tuple[bytes, int, int]:
        compressor = self._compressors.get(level)
        if compressor is None:
            compressor = self._compressors[level] = zstandard.ZstdCompressor(
                level=level, write_content_size=True
            )
        return stored_payload(compressor, raw)
