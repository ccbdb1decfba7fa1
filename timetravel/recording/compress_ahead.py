"""Compressing a recording's frames on a second core while the run goes on (issue 18 part 6).

**Why.** zstd over the event batches and snapshot pages was the largest single cost of recording
the dp_training demo at the message level: 297 M of the recording's +716 M instructions, 34 MB
of event batches at level -3. python-zstandard releases the GIL while it compresses, and this
machine has two cores, so the compression can run beside the simulation instead of inside it.

**Not in the simulation path.** The thread only turns bytes the recorder's thread already
produced (a packed batch, a BLOBS or MANIFEST payload) into their stored form: zstd, nothing else.
It never touches the World, the snapshot store, the catalog or the file. The writer (writer.py)
keeps every frame in a queue in submission order and writes a frame, on its own thread, only once
every frame before it is written, so the file holds the same frames, in the same order, bit for
bit, as when each was compressed inline (tests/test_recording_compress_ahead.py compares them).

**Unlike write_thread.py** this thread runs almost no Python: it takes a job, makes one C call
with the GIL released and hands back two values. The writer thread (write_thread.py) runs whole
write jobs (XOR-encoding pages, packing, catalog updates) in Python, and beside a kernel that keeps
its own thread busy in Python that only contended for the GIL, which is why plain-data worlds
write inline and compress here. Every time the thread takes the GIL back, the simulation's thread
gives it up (after the 5 ms switch interval) and waits until the thread has run: on a machine
whose cores are busy with other work that wait grows, so the thread does as little as it can with
the GIL (the checksum, xxh3 of the stored bytes, is computed by the writer).

**Only with cores to spare.** On the shared 2-core machine of issue 18 it did not pay in wall
time. The demo's recording ran half the instructions on the simulation's thread (+329 M over the
unrecorded run instead of +677 M inline), yet alternating plain / inline / ahead runs (best of 12-15)
read 1.113 / 1.104 (ratio to plain) at a load of 1.8-2.0 from other work, 1.198 / 1.100 at
1.3-1.8, 1.076 / 1.179 at 1.5-1.7, and 1.097 / 1.340 at 2.8-3.1: with both cores busy the thread
waits for a core, and the simulation's thread waits for it at every hand-back of the GIL (its
time off the CPU grew by 30-120 ms a run). So the recorder compresses ahead by default only where
the process may use COMPRESS_AHEAD_CORES_MIN cores or more (``Recorder(compress_ahead=...)``
decides otherwise); the file is the same either way.

**Bounded.** The writer waits for the oldest frame once FRAMES_AHEAD_RAW_BYTES_MAX bytes wait to
be compressed, so a slow second core slows the run instead of holding the batches in memory.

**Failures.** A compression that raises is raised on the writer's thread when its frame's turn to
be written comes (the next frame written, a sync or close); the frames before it are written.
"""

from __future__ import annotations

import queue
import threading
import weakref
from typing import Any

import zstandard

from timetravel.recording.format import FLAG_ZSTD
from timetravel.recording.write_thread import QUEUE_WAIT_S
from timetravel.sim.interruptions import Uninterrupted

COMPRESS_AHEAD_CORES_MIN = 4
"""The recorder compresses ahead by default only where the process may use this many cores (see
**Only with cores to spare** above): not on the 2-core machine it was measured on."""
FRAMES_AHEAD_RAW_BYTES_MAX = 16 * 1024 * 1024
"""Raw bytes queued for compression before the writer waits: ~8 message-level batches of the demo."""
FRAME_AHEAD_BYTES_MIN = 256 * 1024
"""Smaller payloads are compressed by the writer itself (still written in their turn): zstd takes
~0.2 ms over 256 KiB at level -3, about what handing the GIL back and forth costs on a loaded
machine. The demo's message-level batches (1.9 MB) and full BLOBS frames (1 MB) go to the thread;
its manifests (~110 KB) and every frame of the collective level stay with the writer, whose
recording then never starts the thread."""


def stored_payload(compressor: zstandard.ZstdCompressor, raw: bytes) -> tuple[bytes, int]:
    """A frame payload as stored, and its flags: raw when zstd does not shrink it."""
    stored = compressor.compress(raw)
    if len(stored) >= len(raw):
        return raw, 0
    return stored, FLAG_ZSTD


class Compression:
    """One payload to compress: the thread settles it, the writer asks ``done()`` or waits on
    ``result()``. (Not concurrent.futures: importing it cost ~5 ms, 1.5% of a collective-level demo
    run, which a plain run does not pay.)"""

    __slots__ = ("_error", "_finished", "_stored", "level", "raw")

    def __init__(self, raw: bytes, level: int) -> None:
        self.raw: bytes | None = raw
        self.level = level
        self._stored: tuple[bytes, int] | None = None
        self._error: BaseException | None = None
        self._finished = threading.Event()

    def settle(self, stored: tuple[bytes, int] | None, error: BaseException | None = None) -> None:
        self.raw = None
        self._stored, self._error = stored, error
        self._finished.set()

    def done(self) -> bool:
        return self._finished.is_set()

    def result(self) -> tuple[bytes, int]:
        """The stored form (waits for it); raises what the compression raised."""
        while True:  # short waits, each a section no Ctrl-C cuts: it would leave the Event's lock taken
            with Uninterrupted():
                if self._finished.wait(QUEUE_WAIT_S):
                    break
        if self._error is not None:
            raise self._error
        assert self._stored is not None
        return self._stored


class CompressAhead:
    """One thread that compresses frame payloads in submission order. See the module docstring."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[Compression | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        """Started by the first payload submitted."""
        self._stopping: weakref.finalize[Any, Any] | None = None
        """Ends the thread when this object goes (a writer dropped without close) or at ``stop``."""

    def submit(self, raw: bytes, level: int) -> Compression:
        job = Compression(raw, level)
        if self._thread is None:
            self._thread = threading.Thread(
                target=_compress_jobs, args=(self._jobs,), name=self.name, daemon=True
            )
            self._thread.start()
            self._stopping = weakref.finalize(self, self._jobs.put, None)
        self._jobs.put(job)
        return job

    def stop(self) -> None:
        """End the thread once what was submitted ran (the writer waited for it already)."""
        if self._thread is not None and self._stopping is not None:
            self._stopping()
            self._thread.join()


def _compress_jobs(jobs: queue.SimpleQueue[Compression | None]) -> None:
    compressors: dict[int, zstandard.ZstdCompressor] = {}
    """Used only on this thread (a ZstdCompressor is not for two threads at once)."""
    while (job := jobs.get()) is not None:
        try:
            compressor = compressors.get(job.level)
            if compressor is None:
                compressor = compressors[job.level] = zstandard.ZstdCompressor(
                    level=job.level, write_content_size=True
                )
            assert job.raw is not None
            job.settle(stored_payload(compressor, job.raw))
        except BaseException as error:  # raised on the writer's thread when the frame's turn comes
            job.settle(None, error)
