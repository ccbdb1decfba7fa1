"""When a recording reaches the disk (issue 18 part 6): every snapshot is flushed to the OS as soon
as the recorder's writer thread wrote it (``Recorder.flush`` waits for that), so a reader (or a
writer that dies) sees it; fsync, which only an OS crash needs and which cost ~10 ms a snapshot,
runs every SYNC_BYTES_MIN bytes and at close."""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pytest

from timetravel.recording import Recorder, RecordingReader
from timetravel.recording import writer as recording_writer
from timetravel.recording.format import MAGIC
from timetravel.scenarios import get_scenario
from timetravel.sim.runner import build_world


def _recorder(path: Path) -> Recorder:
    scenario = get_scenario("gossip")
    config = scenario.resolve_config(["nodes=24", "rumors=6"])
    return Recorder(scenario, build_world(scenario, config, 4), path, snapshot_every_events=256)


def _count_fsyncs(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = os.fsync

    def counting(descriptor: int) -> None:
        calls.append(descriptor)
        real(descriptor)

    monkeypatch.setattr(recording_writer.os, "fsync", counting)
    return calls


def test_snapshots_are_flushed_but_fsynced_only_at_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs = _count_fsyncs(monkeypatch)
    recorder = _recorder(tmp_path / "run.ttr")
    recorder.run(max_events=1000)
    recorder.flush()
    taken = len(recorder.writer.catalog.manifests["main"])
    assert taken >= 2 and fsyncs == []  # a few snapshots of a few KB: no fsync yet
    with RecordingReader.open(tmp_path / "run.ttr") as reader:  # yet every snapshot is readable
        assert len(reader.catalog.manifests["main"]) == taken
    result = recorder.run()
    recorder.finish(result)
    assert len(fsyncs) == 1  # close


def test_a_snapshot_fsyncs_once_enough_bytes_were_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fsyncs = _count_fsyncs(monkeypatch)
    monkeypatch.setattr(recording_writer, "SYNC_BYTES_MIN", 1)
    recorder = _recorder(tmp_path / "run.ttr")
    recorder.run(max_events=1000)
    recorder.flush()
    assert (
        len(fsyncs) == len(recorder.writer.catalog.manifests["main"]) >= 2
    )  # every snapshot wrote at least a byte
    recorder.finish(recorder.run())


def test_every_snapshot_starts_the_writeback_of_the_bytes_it_wrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between fsyncs, each snapshot asks the OS to start writing what was written since the last
    one (writeback.py): contiguous ranges, from the magic's end to the last frame flushed."""
    started: list[tuple[int, int]] = []
    real = recording_writer.start_writeback

    def recording(descriptor: int, offset: int, length: int) -> bool:
        started.append((offset, length))
        return real(descriptor, offset, length)

    monkeypatch.setattr(recording_writer, "start_writeback", recording)
    recorder = _recorder(tmp_path / "run.ttr")
    recorder.run(max_events=1000)
    recorder.flush()
    assert len(started) >= 3  # the first snapshot, the later ones, the flush
    assert started[0][0] == len(MAGIC)  # the header frame onwards
    for (offset, length), (next_offset, _) in itertools.pairwise(started):
        assert next_offset == offset + length
    assert started[-1][0] + started[-1][1] == recorder.writer.offset == os.path.getsize(tmp_path / "run.ttr")
    recorder.finish(recorder.run())


def test_no_writeback_is_started_where_an_fsync_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[int] = []
    monkeypatch.setattr(recording_writer, "SYNC_BYTES_MIN", 1)
    monkeypatch.setattr(recording_writer, "start_writeback", lambda *_arguments: started.append(1))
    recorder = _recorder(tmp_path / "run.ttr")
    recorder.run(max_events=1000)
    recorder.finish(recorder.run())
    assert started == []


def test_start_writeback_accepts_a_flushed_range_where_the_system_has_it(tmp_path: Path) -> None:
    from timetravel.recording.writeback import start_writeback, writeback_available

    with open(tmp_path / "file", "wb") as file:
        file.write(b"x" * 65536)
        file.flush()
        assert start_writeback(file.fileno(), 0, 65536) == writeback_available()
        assert start_writeback(file.fileno(), 0, 0) is False  # nothing to write
    assert (tmp_path / "file").read_bytes() == b"x" * 65536
