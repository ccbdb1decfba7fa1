"""The reader's limits, one by one, and a property-based fuzz of it (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hostile_corpus import Frame, compressed_frame, read_frames, write_frames
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timetravel.recording import RecordingError, RecordingReader, record_run
from timetravel.recording.catalog import NOTES_KEPT_MAX, SUMMARY_TEXT_CHARS_MAX
from timetravel.recording.format import FrameType
from timetravel.recording.frame_reader import RECORDING_BYTES_MAX_VARIABLE
from timetravel.recording.open_batch import OPEN_CHUNKS_MAX
from timetravel.recording.schema import FRAME_SCHEMAS, check_payload
from timetravel.scenarios import get_scenario
from timetravel.sim.encoding import DecodeError, unpack

RUNNER = Path(__file__).with_name("hostile_runner.py")


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    scenario = get_scenario("gossip")
    path = tmp_path_factory.mktemp("reader") / "gossip.ttr"
    record_run(
        scenario, scenario.resolve_config({"nodes": 16, "rumors": 8}), 2, path, snapshot_every_events=128
    )
    return path


def test_the_decoded_bytes_budget_stops_a_recording_before_it_decodes_past_it(
    source: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with RecordingReader.open(source) as reader:
        needed = reader.decoded_bytes
        assert needed > 0
    with pytest.raises(RecordingError, match=r"past 2000 decoded bytes \(recording_bytes_max"):
        RecordingReader.open(source, recording_bytes_max=2000)
    monkeypatch.setenv(RECORDING_BYTES_MAX_VARIABLE, "2_000")
    with pytest.raises(RecordingError, match="recording_bytes_max"):
        RecordingReader.open(source)
    monkeypatch.setenv(RECORDING_BYTES_MAX_VARIABLE, "lots")
    with pytest.raises(
        RecordingError, match=f"{RECORDING_BYTES_MAX_VARIABLE}='lots' is not a number of bytes"
    ):
        RecordingReader.open(source)


def test_a_frame_is_charged_once_however_often_it_is_read(source: Path) -> None:
    with RecordingReader.open(source) as reader:
        opened = reader.decoded_bytes
        for _ in range(3):
            reader.verify_frames()
        assert reader.decoded_bytes >= opened
        after_one_pass = reader.decoded_bytes
        reader.verify_frames()
        assert reader.decoded_bytes == after_one_pass


def test_decoding_counts_the_containers_it_builds() -> None:
    nested = msgpack.packb([[] for _ in range(1000)])
    assert len(unpack(nested, items_max=2001)) == 1000  # 1,000 lists, and 1 + 1,000 for the outer one
    with pytest.raises(DecodeError, match="more than 1500 containers and entries"):
        unpack(nested, items_max=1500)  # each list is short enough; together they are too many
    with pytest.raises(DecodeError):
        unpack(b"\xdd" + (20_000_000).to_bytes(4, "big") + b"\x90" * 20_000_000, items_max=4_000_000)


def test_array_shapes_are_checked_before_numpy_sees_them() -> None:
    for shape in ([0, 2**63], [2**40, 0, 2**40], [-1], [True]):
        header = msgpack.packb(["uint8", shape, b""])
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # numpy's overflow RuntimeWarning was printed before
            with pytest.raises(DecodeError, match="array shape"):
                unpack(msgpack.packb(msgpack.ExtType(1, header)))


def test_the_schema_names_the_field_and_its_range() -> None:
    end = {"stop": "drained", "outcome": "pass", "events": 5, "t_end_ns": 1, "state_hash": "0" * 32}
    assert check_payload(FrameType.END, end) is None
    assert (
        check_payload(FrameType.END, {**end, "events": "x"}) == "field 'events' is not an integer (got 'x')"
    )
    assert check_payload(FrameType.END, {**end, "outcome": "won"}) == (
        "field 'outcome' is not one of pass, fail (got 'won')"
    )
    missing = {key: value for key, value in end.items() if key != "events"}
    assert check_payload(FrameType.END, missing) == "field 'events' is missing"
    assert set(FRAME_SCHEMAS) == set(FrameType)


def test_the_catalog_keeps_summaries_however_many_notes_there_are(source: Path, tmp_path: Path) -> None:
    """10,000 notes of 60 KiB each (a 600 MB catalog before): opened under a 512 MiB address-space limit."""
    frames = read_frames(source)
    note = msgpack.packb({"branch": "main", "level": "warning", "message": "n" * (60 * 1024)})
    end = next(i for i, frame in enumerate(frames) if frame.frame_type == FrameType.END)
    frames[end:end] = [compressed_frame(FrameType.NOTE, note)] * 10_000
    path = write_frames(tmp_path / "notes.ttr", frames)
    argv = [["inspect", str(path), "--json"]]
    done = subprocess.run(
        [sys.executable, str(RUNNER), str(512 << 20), "30", json.dumps(argv)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=Path(__file__).parent,
    )
    [result] = json.loads(done.stdout.splitlines()[-1])
    assert result["traceback"] is None and result["code"] == 0, result
    with RecordingReader.open(path) as reader:
        assert len(reader.catalog.notes) == NOTES_KEPT_MAX and reader.catalog.notes_dropped == 9_000
        assert len(reader.catalog.notes[0]["message"]) == SUMMARY_TEXT_CHARS_MAX
        assert reader.catalog.summary_bytes < 4 << 20


# -- property-based fuzz of the reader (slow) ------------------------------------------------------

FIELD_VALUES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**64 - 1),
    st.text(max_size=40),
    st.binary(max_size=40),
    st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=4),
    st.dictionaries(st.text(max_size=8), st.integers(min_value=0, max_value=2**32), max_size=3),
)


def _exercise(path: Path) -> None:
    """Open, then touch everything a front end would: restore every snapshot, decode every batch."""
    try:
        with RecordingReader.open(path) as reader:
            reader.verify_frames()
            for batches in reader.catalog.events.values():
                for batch in batches:
                    reader.events(batch)
            for infos in reader.catalog.manifests.values():
                for info in infos:
                    reader.restore(info)
            reader.describe_loss()
    except RecordingError:
        pass


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_forged_field_is_a_recording_error_or_nothing(
    source: Path, tmp_path: Path, data: st.DataObject
) -> None:
    frames = read_frames(source)
    for _ in range(data.draw(st.integers(1, 3))):
        position = data.draw(st.integers(0, len(frames) - 1))
        payload = dict(frames[position].payload or {})
        key = data.draw(st.sampled_from([*sorted(payload), "extra"]))
        payload[key] = data.draw(FIELD_VALUES)
        frames[position] = Frame(frames[position].frame_type, payload)
    if data.draw(st.booleans()):
        first, second = data.draw(st.integers(1, len(frames) - 1)), data.draw(st.integers(1, len(frames) - 1))
        frames[first], frames[second] = frames[second], frames[first]
    path = write_frames(tmp_path / "forged.ttr", frames, index=False)
    _exercise(path)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(cut=st.floats(0, 1), flips=st.lists(st.tuples(st.floats(0, 1), st.integers(1, 255)), max_size=4))
def test_any_cut_or_flipped_file_is_a_recording_error_or_opens(
    source: Path, tmp_path: Path, cut: float, flips: list[tuple[float, int]]
) -> None:
    data = bytearray(source.read_bytes())
    for where, mask in flips:
        data[int(where * (len(data) - 1))] ^= mask
    path = tmp_path / "damaged.ttr"
    path.write_bytes(bytes(data[: max(1, int(cut * len(data)))]))
    _exercise(path)


def test_docs_print_the_schema_table_the_reader_uses() -> None:
    from timetravel.recording.schema import schema_table_markdown

    text = (Path(__file__).resolve().parent.parent / "docs" / "recording-format.md").read_text()
    assert schema_table_markdown() in text


@pytest.mark.parametrize(
    "chunks",
    [[b"\x00" * 16], [5], [b"short"], "not a list", [b"\x00" * 16] * (OPEN_CHUNKS_MAX + 1)],
    ids=["missing blob", "not bytes", "short digest", "not a list", "too many"],
)
def test_a_forged_open_batch_chunk_list_is_a_recording_error(
    source: Path, tmp_path: Path, chunks: Any
) -> None:
    frames = read_frames(source)
    position = next(
        number
        for number, frame in enumerate(frames)
        if frame.frame_type == FrameType.MANIFEST and frame.payload and frame.payload["chain"][2]
    )
    payload = dict(frames[position].payload or {})
    payload["chain"] = [payload["chain"][0], payload["chain"][1], chunks]
    frames[position] = Frame(FrameType.MANIFEST, payload)
    path = write_frames(tmp_path / "forged.ttr", frames, index=False)
    with RecordingReader.open(path) as reader:
        forged = next(info for info in reader.manifests() if info.events == payload["events"])
        with pytest.raises(RecordingError):
            reader.restore(forged)
