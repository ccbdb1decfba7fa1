"""The .ttr format: round trip, the page codec on disk, truncation, corruption and limits."""

from __future__ import annotations

import random
import struct
import sys
from pathlib import Path
from typing import Any

import pytest
import zstandard
from recording_writers import gossip_writer
from scenario_fixtures import FLOATS

from timetravel.explore import Session
from timetravel.recording import RecordingError, RecordingReader, RecordingWriter, record_run
from timetravel.recording.format import (
    FLAG_ZSTD,
    FRAME_HEADER_BYTES,
    FRAME_RAW_BYTES_MAX,
    MAGIC,
    FrameType,
    pack_frame_header,
    payload_checksum,
)
from timetravel.scenarios import UnknownScenarioError, get_scenario
from timetravel.sim import Simulation
from timetravel.sim.encoding import pack, unpack
from timetravel.sim.event import Event
from timetravel.sim.runner import build_world
from timetravel.snapshot.codec import CODEC_XOR_SHUFFLE, XOR_CHAIN_MAX

TRUNCATION_OFFSETS = 200
CORRUPTION_OFFSETS = 300


def test_header_says_what_was_run(gossip_recording: tuple[Path, dict[str, Any]]) -> None:
    path, report = gossip_recording
    with RecordingReader.open(path) as reader:
        header = reader.header
        assert reader.used_index and reader.truncation is None
        assert header["format"] == [1, 3]
        assert header["scenario"] == "gossip" and header["seed"] == 3
        assert header["config"] == report["config"]
        assert header["display_unit"] == "ms"
        assert header["code_fingerprint"] == report["code_fingerprint"]
        assert header["platform_fingerprint"] == report["platform_fingerprint"]
        end = reader.end()
        assert end is not None
        assert (end["outcome"], end["events"], end["state_hash"]) == (
            "fail",
            report["events"],
            report["state_hash"],
        )
        assert reader.catalog.failures[0]["signature"] == "assertion:gossip.coverage"


def test_event_batches_cover_every_event_and_match_a_straight_run(
    gossip_recording: tuple[Path, dict[str, Any]],
) -> None:
    path, report = gossip_recording
    scenario = get_scenario("gossip")
    world = build_world(scenario, report["config"], 3)
    processed: list[Event] = []
    Simulation(scenario, world, on_chain_batch=lambda _f, events, _d: processed.extend(events)).run()
    processed.extend(world.chain_batch)
    with RecordingReader.open(path) as reader:
        recorded = [event for batch in reader.event_batches() for event in reader.events(batch)]
        firsts = [batch.first for batch in reader.event_batches()]
    assert firsts == list(range(0, report["events"], 4096))
    assert pack(recorded) == pack(processed)


def test_every_snapshot_restores_to_its_recorded_hash(floats_recording: tuple[Path, dict[str, Any]]) -> None:
    path, report = floats_recording
    with RecordingReader.open(path) as reader:
        manifests = reader.manifests()
        assert len(manifests) == report["recording"]["snapshots"] >= 10
        for info in manifests:
            assert reader.restore(info).state_hash() == info.state_hash
        assert manifests[-1].final and manifests[-1].state_hash == report["state_hash"]


def test_float_pages_are_stored_as_short_xor_chains(floats_recording: tuple[Path, dict[str, Any]]) -> None:
    path, _report = floats_recording
    with RecordingReader.open(path) as reader:
        codecs: dict[bytes, tuple[int, bytes | None]] = {}
        for offset, kind in reader.catalog.frames:
            if kind == FrameType.BLOBS:
                for digest, _kind, codec, base, _itemsize, _data in reader.read_frame(offset)[1]["blobs"]:
                    codecs[digest] = (codec, base)

        def depth(digest: bytes) -> int:
            _codec, base = codecs[digest]
            return 0 if base is None else 1 + depth(base)

        xor_pages = [digest for digest, (codec, _base) in codecs.items() if codec == CODEC_XOR_SHUFFLE]
        assert len(xor_pages) > 50
        depths = [depth(digest) for digest in xor_pages]
        assert max(depths) == XOR_CHAIN_MAX
        assert min(depths) == 1


def test_recording_is_deterministic(tmp_path: Path) -> None:
    config = FLOATS.resolve_config({"steps": 40})
    record_run(FLOATS, config, 9, tmp_path / "a.ttr", snapshot_every_events=64)
    record_run(FLOATS, config, 9, tmp_path / "b.ttr", snapshot_every_events=64)
    assert (tmp_path / "a.ttr").read_bytes() == (tmp_path / "b.ttr").read_bytes()


def test_snapshots_inside_a_chain_batch_store_its_events_once(tmp_path: Path) -> None:
    # Up to format 1.2 every manifest held the open chain batch whole: 64 snapshots inside one batch
    # of 4,096 events stored ~130,000 events. Now the batch's events are chunk blobs, each stored once.
    from timetravel.recording.open_batch import OPEN_CHUNK_EVENTS

    path = tmp_path / "a.ttr"
    pingpong = get_scenario("pingpong")
    record_run(pingpong, pingpong.resolve_config({"rounds": 3000}), 9, path, snapshot_every_events=192)
    named: list[bytes] = []
    with RecordingReader.open(path) as reader:
        manifests = reader.manifests()
        events = reader.manifest(manifests[-1])["events"]
        for info in manifests:
            manifest = reader.manifest(info)
            chunks = manifest["chain"][2]
            assert isinstance(chunks, list)
            assert len(chunks) == -(-(manifest["events"] - manifest["chain"][1]) // OPEN_CHUNK_EVENTS)
            named.extend(chunks)
            world = reader.restore(info)
            assert len(world.chain_batch) == manifest["events"] - manifest["chain"][1]
            stored = sum(len(unpack(reader.value_bytes(digest))) for digest in dict.fromkeys(chunks))
            assert stored == len(world.chain_batch)
    assert len(manifests) > 20 and events > 1000
    distinct = list(dict.fromkeys(named))
    assert len(distinct) <= events // OPEN_CHUNK_EVENTS + len(manifests)  # whole chunks once each
    assert len(named) > 2 * len(distinct)  # and named again by every later snapshot of their batch


def _header_frame_end(path: Path) -> int:
    with RecordingReader.open(path) as reader:
        return reader.catalog.frames[1][0]


def test_truncated_at_random_offsets_opens_with_every_complete_frame(
    gossip_recording: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, report = gossip_recording
    data = path.read_bytes()
    header_end = _header_frame_end(path)
    with RecordingReader.open(path) as full:
        frame_offsets = [offset for offset, _kind in full.catalog.frames]
    rng = random.Random(5)
    offsets = sorted(rng.sample(range(len(data)), TRUNCATION_OFFSETS))
    cut = tmp_path / "cut.ttr"
    for offset in offsets:
        cut.write_bytes(data[:offset])
        if offset < header_end:
            with pytest.raises(RecordingError, match=r"nothing to open|truncated"):
                RecordingReader.open(cut)
            continue
        with RecordingReader.open(cut) as reader:
            complete = [frame for frame in frame_offsets if frame < offset]
            assert [frame for frame, _kind in reader.catalog.frames] == complete[: len(reader.catalog.frames)]
            assert len(reader.catalog.frames) >= len(complete) - 1
            assert reader.describe_loss(), offset
            assert reader.end() is None or offset > frame_offsets[-1]
            if reader.manifests():
                last = reader.manifests()[-1]
                assert reader.restore(last).state_hash() == last.state_hash
    assert report["events"] > 0


def test_truncated_recording_seeks_within_what_survives(
    gossip_recording: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, report = gossip_recording
    data = path.read_bytes()
    with RecordingReader.open(path) as full:
        cut_at = full.manifests()[3].offset + 10
    cut = tmp_path / "cut.ttr"
    cut.write_bytes(data[:cut_at])
    with Session.open(cut) as session:
        assert not session.info.complete
        assert any("truncated" in line for line in session.info.loss)
        end = session.goto("end")
        assert end.events == session.end.events < report["events"]
        scenario = get_scenario("gossip")
        world = build_world(scenario, report["config"], 3)
        Simulation(scenario, world).run(max_events=end.events)
        assert session.state_hash() == world.state_hash()


def test_single_byte_corruption_anywhere_is_a_clean_error(tmp_path: Path) -> None:
    path = tmp_path / "small.ttr"
    record_run(FLOATS, FLOATS.resolve_config({"trainers": 2, "steps": 40}), 3, path, snapshot_every_events=64)
    data = path.read_bytes()
    rng = random.Random(11)
    offsets = set(rng.sample(range(len(data)), CORRUPTION_OFFSETS))
    offsets |= set(range(64)) | set(range(len(data) - 64, len(data)))
    damaged = tmp_path / "damaged.ttr"
    for offset in sorted(offsets):
        corrupt = bytearray(data)
        corrupt[offset] ^= 1 << rng.randrange(8)
        damaged.write_bytes(bytes(corrupt))
        with pytest.raises(RecordingError) as caught, RecordingReader.open(damaged) as reader:
            reader.verify_frames()
            for info in reader.manifests():
                reader.restore(info)
        message = str(caught.value)
        assert "\n" not in message
        assert "byte" in message or "magic" in message or "blob" in message, message


def test_corruption_message_names_the_frame_and_offset(
    gossip_recording: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, _report = gossip_recording
    with RecordingReader.open(path) as reader:
        number, (offset, _kind) = next(
            (number, frame)
            for number, frame in enumerate(reader.catalog.frames)
            if frame[1] == FrameType.MANIFEST
        )
    corrupt = bytearray(path.read_bytes())
    corrupt[offset + FRAME_HEADER_BYTES + 3] ^= 0xFF
    damaged = tmp_path / "damaged.ttr"
    damaged.write_bytes(bytes(corrupt))
    with RecordingReader.open(damaged) as reader, pytest.raises(RecordingError) as caught:
        reader.verify_frames()
    assert (
        str(caught.value)
        == f"{damaged}: frame {number} (MANIFEST) at byte {offset}: checksum mismatch (the frame is corrupt)"
    )


def _single_frame_file(path: Path, frame_type: int, stored: bytes, raw_length: int, flags: int) -> None:
    header = pack_frame_header(frame_type, flags, len(stored), raw_length, payload_checksum(stored))
    path.write_bytes(MAGIC + header + stored)


def test_a_decompression_bomb_is_refused(tmp_path: Path) -> None:
    bomb = zstandard.ZstdCompressor(level=19).compress(b"\x00" * (64 * 1024 * 1024))
    path = tmp_path / "bomb.ttr"
    _single_frame_file(path, FrameType.HEADER, bomb, 1000, FLAG_ZSTD)
    with pytest.raises(RecordingError, match=r"does not decode|payload is|declares"):
        RecordingReader.open(path)


def test_lengths_past_the_caps_are_corruption(tmp_path: Path) -> None:
    path = tmp_path / "huge.ttr"
    _single_frame_file(path, FrameType.HEADER, b"\x80", FRAME_RAW_BYTES_MAX + 1, 0)
    with pytest.raises(RecordingError, match="out of range"):
        RecordingReader.open(path)


def test_not_a_recording(tmp_path: Path) -> None:
    path = tmp_path / "text.ttr"
    path.write_text("hello, I am not a recording\n")
    with pytest.raises(RecordingError, match="not a timetravel recording"):
        RecordingReader.open(path)


def test_a_recording_never_imports_the_code_it_names(
    gossip_recording: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    path, _report = gossip_recording
    with RecordingReader.open(path) as reader:
        header = dict(reader.header)
    header["scenario"] = "evil"
    header["scenario_module"] = "timetravel_test_never_imported"
    forged = tmp_path / "forged.ttr"
    writer = RecordingWriter.create(forged, header)
    writer.close()
    with pytest.raises(UnknownScenarioError, match="--scenario MODULE:ATTR") as caught:
        Session.open(forged)
    assert "timetravel_test_never_imported" in str(caught.value)
    assert "timetravel_test_never_imported" not in sys.modules


def test_appending_a_branch_keeps_the_main_run_and_its_index(
    gossip_recording: tuple[Path, dict[str, Any]], gossip_copy: Path
) -> None:
    path, report = gossip_recording
    copy = gossip_copy
    writer = RecordingWriter.append(copy)
    writer.frame(FrameType.BRANCH, {"name": "b1", "parent": "main", "at_events": 1000, "changes": []})
    end = {"branch": "b1", "stop": "drained", "outcome": "pass", "failure": None, "events": 1000}
    writer.frame(FrameType.END, {**end, "t_end_ns": 5, "state_hash": "0" * 32, "hash_chain": "0" * 32})
    writer.close()
    with RecordingReader.open(copy) as reader:
        assert reader.used_index
        assert set(reader.catalog.branches) == {"b1"}
        assert reader.catalog.branches["b1"]["parent"] == "main"
        assert reader.end("main")["state_hash"] == report["state_hash"]
        assert reader.end("b1")["outcome"] == "pass"
        assert reader.verify_frames() == len(reader.catalog.frames)
    old_index = struct.unpack("<Q", path.read_bytes()[-16:-8])[0]
    new_index = struct.unpack("<Q", copy.read_bytes()[-16:-8])[0]
    assert copy.read_bytes()[:old_index] == path.read_bytes()[:old_index]
    assert new_index > old_index


def test_the_choice_log_is_recorded_when_asked(tmp_path: Path) -> None:
    scenario = get_scenario("gossip")
    config = scenario.resolve_config({"nodes": 16, "rumors": 4})
    record_run(scenario, config, 2, tmp_path / "with.ttr", snapshot_every_events=64, record_choices=True)
    record_run(scenario, config, 2, tmp_path / "without.ttr", snapshot_every_events=64)
    log: list[list[Any]] = []
    Simulation(scenario, build_world(scenario, config, 2), choice_log=log).run()
    with RecordingReader.open(tmp_path / "with.ttr") as reader:
        assert reader.choices() == log
        assert len(log) > 100
    with RecordingReader.open(tmp_path / "without.ttr") as reader:
        assert reader.choices() == []


@pytest.mark.parametrize("length", [0, 1, 255, 256, 65_535, 65_536, 2_000_003])
def test_an_events_payload_packs_as_msgpack_would(length: int) -> None:
    # EVENTS frames join the batch behind its bin header instead of packing it: the bytes must
    # be msgpack's own at every bin width (8, 16, 32), or old and new recordings would differ.
    from timetravel.recording.events_frame import pack_events_payload

    payload = {"branch": "main", "first": 4096, "count": 7, "digest": bytes(16), "partial": False}
    events = random.Random(length).randbytes(length)
    assert pack_events_payload(payload, events) == pack({**payload, "events": events})


def test_a_frame_that_cannot_be_packed_leaves_nothing_behind_for_the_next(tmp_path: Path) -> None:
    # Frames are packed in one Packer kept between frames: a value it refuses half-way must not
    # leave its first fields in front of the next frame's.
    writer = gossip_writer(tmp_path / "refused.ttr", chain_batch_events=64)
    with pytest.raises(TypeError, match="not plain data"):
        writer.frame(FrameType.NOTE, {"branch": "main", "level": "info", "message": object()})
    note = {"branch": "main", "level": "info", "message": "kept"}
    writer.frame(FrameType.NOTE, note)
    writer.close()
    with RecordingReader.open(tmp_path / "refused.ttr") as reader:
        assert [record["message"] for record in reader.catalog.notes] == ["kept"]
