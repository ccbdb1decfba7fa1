"""The recorder's writer thread (recording/write_thread.py): the file is the one an inline writer
writes, bit for bit; the queue is bounded; a failed write reaches the recorder; nothing is left
running."""

from __future__ import annotations

import gc
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from timetravel.recording import Recorder, RecordingReader
from timetravel.recording.write_thread import WRITE_JOBS_QUEUED_MAX, InlineWrites, WriteThread
from timetravel.scenarios import get_scenario
from timetravel.sim.runner import build_world


def _record(
    path: Path, scenario_name: str, settings: list[str], seed: int, *, background: bool
) -> dict[str, Any]:
    scenario = get_scenario(scenario_name)
    world = build_world(scenario, scenario.resolve_config(settings), seed)
    recorder = Recorder(scenario, world, path, snapshot_every_events=256, background_writes=background)
    end = recorder.finish(recorder.run())
    assert (type(recorder.write_thread) is WriteThread) == background
    return {**end, "snapshots": len(recorder.writer.catalog.manifests["main"])}


@pytest.mark.parametrize(
    ("scenario_name", "settings", "seed"),
    [("gossip", ["nodes=48", "rumors=12"], 5), ("dp_training", ["ranks=4", "steps=20"], 2)],
)
def test_the_writer_thread_writes_the_same_file_as_inline_writes(
    tmp_path: Path,
    scenario_name: str,
    settings: list[str],
    seed: int,
) -> None:
    threaded = _record(tmp_path / "threaded.ttr", scenario_name, settings, seed, background=True)
    inline = _record(tmp_path / "inline.ttr", scenario_name, settings, seed, background=False)
    assert (tmp_path / "threaded.ttr").read_bytes() == (tmp_path / "inline.ttr").read_bytes()
    assert threaded["snapshots"] >= 3
    assert threaded["hash_chain"] == inline["hash_chain"]


def test_only_recordings_of_worlds_with_external_processes_get_a_thread(tmp_path: Path) -> None:
    gossip = get_scenario("gossip")
    world = build_world(gossip, gossip.resolve_config(["nodes=8"]), 1)
    plain = Recorder(gossip, world, tmp_path / "plain.ttr")
    assert isinstance(plain.write_thread, InlineWrites)  # the kernel keeps this thread busy: no gain
    plain.finish(plain.run())
    assert get_scenario("torch").world_source is not None  # what gives torch recordings the thread


def _writer_threads(path: Path) -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == f"timetravel writer {path.name}"]


def test_no_writer_thread_outlives_its_recording(tmp_path: Path) -> None:
    path = tmp_path / "finished-here.ttr"
    _record(path, "gossip", ["nodes=16", "rumors=4"], 1, background=True)
    assert not _writer_threads(path)
    with RecordingReader.open(path) as reader:
        assert reader.truncation is None and reader.end("main") is not None


def test_a_recorder_dropped_without_finish_ends_its_thread(tmp_path: Path) -> None:
    path = tmp_path / "dropped-here.ttr"
    scenario = get_scenario("gossip")
    recorder = Recorder(
        scenario,
        build_world(scenario, scenario.resolve_config(["nodes=16"]), 1),
        path,
        snapshot_every_events=64,
        background_writes=True,
    )
    recorder.run(max_events=200)
    (thread,) = _writer_threads(path)
    del recorder  # the last reference (its simulation's callbacks make a cycle: the collector frees it)
    gc.collect()
    thread.join(timeout=30)
    assert not thread.is_alive()


def test_a_failed_write_is_raised_at_the_next_submit_and_stops_later_writes() -> None:
    written: list[int] = []
    writes = WriteThread("test writer")

    def fail() -> None:
        raise OSError(28, "No space left on device")

    writes.submit(lambda: written.append(1))
    writes.submit(fail)
    writes.submit(lambda: written.append(3))  # queued before the failure is known: skipped
    with pytest.raises(OSError, match="No space left"):
        writes.drain()
    with pytest.raises(OSError, match="No space left"):
        writes.submit(lambda: written.append(4))
    writes.stop()
    assert written == [1] and writes.failed


def test_submit_blocks_once_the_queue_is_full() -> None:
    release = threading.Event()
    writes = WriteThread("test writer")
    started = threading.Event()

    def first() -> None:
        started.set()
        release.wait(timeout=30)

    writes.submit(first)
    assert started.wait(timeout=30)  # the thread holds the first job; the queue is empty
    for _ in range(WRITE_JOBS_QUEUED_MAX):
        writes.submit(lambda: None)
    blocked = threading.Thread(target=writes.submit, args=(lambda: None,))
    blocked.start()
    blocked.join(timeout=0.5)
    assert blocked.is_alive()  # one job past the bound waits for room
    release.set()
    blocked.join(timeout=30)
    assert not blocked.is_alive()
    writes.drain()
    writes.stop()


CTRL_C_INSIDE_THE_QUEUE_LOCK = """
import os, signal
from timetravel.cli.interrupts import CommandSignals
from timetravel.recording.write_thread import WriteThread

CommandSignals().install()  # the command line's handlers, as `timetravel torchrun` has them
writer = WriteThread("test")


class Interrupting(type(writer._jobs.not_full)):
    armed = True

    def __enter__(self):
        entered = super().__enter__()
        if Interrupting.armed:  # the queue's lock is taken: Ctrl-C now, once
            Interrupting.armed = False
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(10_000):
                pass  # Python runs the handler here, inside the lock
        return entered


writer._jobs.not_full.__class__ = Interrupting
try:
    writer.submit(lambda: None)
except KeyboardInterrupt:
    print("interrupted")
writer.stop()  # puts the end of the queue: waited for ever on the lock the Ctrl-C had left taken
print("stopped")
"""


def test_a_ctrl_c_that_comes_inside_the_queue_s_lock_is_raised_after_it(tmp_path: Path) -> None:
    """Seen once in 50 Ctrl-Cs of torchrun --record: the command hung in abort (issue 32's soak)."""
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_INSIDE_THE_QUEUE_LOCK], capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["interrupted", "stopped"], done.stderr[-2000:]
