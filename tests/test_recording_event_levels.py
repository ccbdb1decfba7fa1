"""The zstd level of an EVENTS frame follows its batch's bytes an event (issue 18 part 6).

Batches of EVENT_BYTES_HEAVY or more bytes an event (a message-level all-reduce's gradient chunks)
are compressed at ZSTD_LEVEL_EVENTS_HEAVY, the rest at ZSTD_LEVEL_EVENTS: the choice is a function
of the batch, so the same run records the same file, and readers need nothing new (a zstd frame
says nothing of its level)."""

from __future__ import annotations

from pathlib import Path

import zstandard

from timetravel.recording import Recorder, RecordingReader
from timetravel.recording.events_frame import (
    EVENT_BYTES_HEAVY,
    ZSTD_LEVEL_EVENTS,
    ZSTD_LEVEL_EVENTS_HEAVY,
    events_level,
    pack_events_payload,
)
from timetravel.recording.format import FLAG_ZSTD, FRAME_HEADER, FRAME_HEADER_BYTES, FrameType
from timetravel.scenarios import get_scenario
from timetravel.sim.encoding import unpack
from timetravel.sim.runner import build_world


def test_a_batch_takes_the_heavy_level_from_its_bytes_an_event() -> None:
    assert events_level(b"x" * (EVENT_BYTES_HEAVY * 10), 10) == ZSTD_LEVEL_EVENTS_HEAVY
    assert events_level(b"x" * (EVENT_BYTES_HEAVY * 10 - 1), 10) == ZSTD_LEVEL_EVENTS
    assert events_level(b"", 0) == ZSTD_LEVEL_EVENTS


def _record(path: Path, scenario_name: str, settings: list[str], max_events: int) -> None:
    scenario = get_scenario(scenario_name)
    world = build_world(scenario, scenario.resolve_config(settings), 1)
    recorder = Recorder(scenario, world, path, snapshot_every_events=4096)
    recorder.finish(recorder.run(max_events=max_events))


def _events_frames(path: Path) -> list[tuple[bytes, bytes, dict]]:
    """(stored bytes, raw payload, decoded payload) of every EVENTS frame."""
    data = path.read_bytes()
    frames = []
    with RecordingReader.open(path) as reader:
        for batch in reader.catalog.events["main"]:
            _marker, _kind, flags, stored_length, _raw, _check, _header_check = FRAME_HEADER.unpack_from(
                data, batch.offset
            )
            assert flags & FLAG_ZSTD
            start = batch.offset + FRAME_HEADER_BYTES
            stored = data[start : start + stored_length]
            raw = zstandard.ZstdDecompressor().decompress(stored)
            frames.append((stored, raw, reader.frame_payload(batch.offset, FrameType.EVENTS)))
    return frames


def test_gradient_chunk_batches_are_stored_at_the_heavy_level_and_read_back(tmp_path: Path) -> None:
    path = tmp_path / "dp.ttr"
    _record(path, "dp_training", ["preset=demo"], 9000)
    frames = _events_frames(path)
    assert len(frames) >= 2
    for stored, raw, payload in frames:
        assert len(payload["events"]) >= EVENT_BYTES_HEAVY * payload["count"]  # ring chunks: ~470 B an event
        assert stored == zstandard.ZstdCompressor(
            level=ZSTD_LEVEL_EVENTS_HEAVY, write_content_size=True
        ).compress(raw)
        assert raw == pack_events_payload(
            {key: payload[key] for key in payload if key != "events"}, payload["events"]
        )
        assert len(unpack(payload["events"])) == payload["count"]
    again = tmp_path / "again.ttr"
    _record(again, "dp_training", ["preset=demo"], 9000)
    assert again.read_bytes() == path.read_bytes()


def test_small_event_batches_keep_the_usual_level(tmp_path: Path) -> None:
    path = tmp_path / "gossip.ttr"
    _record(path, "gossip", ["nodes=64", "rumors=40"], 9000)
    frames = _events_frames(path)
    assert len(frames) >= 2
    for stored, raw, payload in frames:
        assert len(payload["events"]) < EVENT_BYTES_HEAVY * payload["count"]
        assert stored == zstandard.ZstdCompressor(level=ZSTD_LEVEL_EVENTS, write_content_size=True).compress(
            raw
        )
