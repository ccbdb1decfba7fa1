"""The recorder's writer thread: snapshot pages encoded, compressed and written while the run goes on.

**Why a thread, when the simulation path has none.** A recorded torch run spent a third of its
wall time (bench torch: 4.2 s of 12.1 s) writing snapshots — XOR-encoding the float pages that
changed, packing them into BLOBS frames, zstd, the writes and an fsync every SYNC_BYTES_MIN —
while every rank waited on the coordinator for its next collective. None of it decides anything in
the run: it turns a snapshot that is already taken into bytes on disk. So it runs here, beside the
simulation, while the coordinator serves the ranks again (zstd, the writes and fsync release the
GIL; the rest fills the time the coordinator's own thread spends waiting in ``select``).

**What keeps it deterministic.** The thread never touches the World or the snapshot store. Each job
owns what it reads: a snapshot's new pages (immutable bytes) and its manifest (plain data), taken
on the recorder's thread; an event batch's packed bytes. Jobs run one at a time in the order they
were submitted, through the one :class:`RecordingWriter`, so the file holds the same frames, in the
same order, bit for bit, as when each was written inline (tests/test_recording_write_thread.py).

**Only where it pays.** The thread overlaps writing with a recorder's thread that *waits* — a torch
coordinator waiting on its rank processes. A plain-data world's kernel keeps its thread busy in
Python, so a writer thread there only contends for the GIL: the dp_training demo recorded at the
message level measured 1.08 and 1.16 times its unrecorded run with the thread against 0.91 and 0.93
inline (idle machine, best of 3 each, two rounds). The recorder uses the thread for scenarios whose
worlds own external processes (``Scenario.world_source``) and :class:`InlineWrites` for the others,
whose frames are compressed ahead on a thread that runs only zstd (compress_ahead.py).

**Bounded.** At most WRITE_JOBS_QUEUED_MAX jobs wait; ``submit`` blocks past that, so a disk slower
than the run slows the run instead of holding every snapshot's pages in memory.

**Failures.** A job that raises (no space left, a file size limit) stops every later job; the
error is raised on the recorder's thread at its next ``submit`` or at ``drain``, as the writer's
own error (it names the recording and says it stops at its last complete frame), and the frames
written before it stay readable.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable

from timetravel.sim.interruptions import Uninterrupted

WRITE_JOBS_QUEUED_MAX = 8
"""Jobs waiting for the writer thread: about two snapshots with the event batches between them."""
QUEUE_WAIT_S = 0.05
"""The longest one wait on the queue while a Ctrl-C is held back (``WriteThread._put``)."""

Job = Callable[[], object]
"""A write; what it returns (a frame offset) is not used."""


class WriteThread:
    """One thread that runs write jobs in submission order. See the module docstring."""

    def __init__(self, name: str) -> None:
        self._jobs: queue.Queue[Job | None] = queue.Queue(maxsize=WRITE_JOBS_QUEUED_MAX)
        self._error: BaseException | None = None
        self._stopped = False
        self._abandoned = False
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        """Queue ``job`` (blocks while WRITE_JOBS_QUEUED_MAX wait); raises an earlier job's error."""
        assert not self._stopped, "submit after stop"
        self._raise_failure()
        self._put(job)

    def _put(self, job: Job | None) -> None:
        """``put`` in short waits, each a section no Ctrl-C cuts (sim/interruptions.py): a Ctrl-C
        inside the queue's lock left it locked, and the ``put`` that ends the thread waited for ever."""
        while True:
            with Uninterrupted():
                try:
                    self._jobs.put(job, timeout=QUEUE_WAIT_S)
                    return
                except queue.Full:
                    pass

    def drain(self) -> None:
        """Wait until every submitted job ran; raises the first job's error, if one failed."""
        done = self._jobs.all_tasks_done
        while True:
            with Uninterrupted(), done:  # Queue.join, in short waits (see _put)
                if not self._jobs.unfinished_tasks:
                    break
                done.wait(QUEUE_WAIT_S)
        self._raise_failure()

    def stop(self) -> None:
        """Run what is queued, then end the thread (idempotent; errors are left to ``drain``)."""
        if self._stopped:
            return
        self._stopped = True
        self._put(None)
        self._thread.join()

    def abandon(self) -> None:
        """End the thread once what is queued ran, without waiting (its recorder was dropped without
        ``finish`` or ``abort``: the thread must not outlive it, blocked on an empty queue)."""
        self._abandoned = True
        with contextlib.suppress(queue.Full):
            self._jobs.put_nowait(None)

    @property
    def failed(self) -> bool:
        return self._error is not None

    def _raise_failure(self) -> None:
        if self._error is not None:
            raise self._error

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                if job is None:
                    return
                if self._error is None:
                    job()
            except BaseException as error:  # handed to the recorder's thread, raised there
                self._error = error
            finally:
                self._jobs.task_done()
            if self._abandoned and self._jobs.empty():
                return


class InlineWrites:
    """The same interface, each job run at once on the caller's thread (plain-data recordings)."""

    def __init__(self, name: str) -> None:
        self.name = name

    def submit(self, job: Job) -> None:
        job()

    def drain(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def abandon(self) -> None:
        pass

    @property
    def failed(self) -> bool:
        return False
