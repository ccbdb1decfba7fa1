"""Elided arrays (sim/elided.py): an array whose bytes a recording did not keep hashes, snapshots and
restores as the array it stands for, and refuses to make up values."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from timetravel.recording import Recorder, RecordingReader
from timetravel.recording.format import RecordingError
from timetravel.scenarios import get_scenario
from timetravel.sim.elided import ElidedArray, ElidedError
from timetravel.sim.encoding import array_digest, digest, elided, pack
from timetravel.sim.runner import build_world
from timetravel.snapshot.restore import restore
from timetravel.snapshot.store import SnapshotStore


def _arrays(world_nodes: dict[str, object]) -> list[object]:
    found: list[object] = []

    def walk(value: object) -> None:
        if isinstance(value, (np.ndarray, ElidedArray)):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, list):
            for item in value:
                walk(item)

    walk(world_nodes)
    return found


def test_an_elided_array_hashes_as_the_array_it_stands_for() -> None:
    array = np.arange(50_000, dtype=np.float32).reshape(250, 200)
    stand_in = elided(array)
    assert stand_in.digest == array_digest(array)
    assert digest({"w": stand_in, "step": 3}) == digest({"w": array, "step": 3})
    assert stand_in.shape == (250, 200) and stand_in.nbytes == array.nbytes
    assert stand_in == elided(array.copy()) and stand_in != elided(array + 1)


def test_an_elided_array_never_makes_up_values() -> None:
    stand_in = elided(np.ones(10, dtype=np.float64))
    with pytest.raises(ElidedError):
        np.asarray(stand_in)
    with pytest.raises(ElidedError):
        pack({"w": stand_in})


def _dp_world(elide: int | None):  # type: ignore[no-untyped-def]
    scenario = dataclasses.replace(get_scenario("dp_training"), snapshot_elide_bytes_min=elide)
    world = build_world(scenario, scenario.resolve_config(["ranks=4", "steps=6", "params=4096"]), 3)
    return scenario, world


def test_a_snapshot_taken_eliding_large_arrays_restores_them_elided_with_the_same_hash() -> None:
    _scenario, world = _dp_world(None)
    store = SnapshotStore(bytes_max=0)
    snapshot = store.take(world, elide_bytes_min=1024)
    restored = restore(snapshot, verify=True)  # the state hash is checked
    arrays = _arrays(restored.nodes)
    large = [array for array in arrays if array.nbytes > 1024]
    assert large and all(isinstance(array, ElidedArray) for array in large)
    assert all(isinstance(array, np.ndarray) for array in arrays if array.nbytes <= 1024)
    kept = restore(SnapshotStore(bytes_max=0).take(world), verify=True)
    assert not any(isinstance(array, ElidedArray) for array in _arrays(kept.nodes))


def test_a_recording_stores_large_arrays_only_in_its_final_snapshot(tmp_path: Path) -> None:
    scenario, world = _dp_world(1024)
    path = tmp_path / "dp.ttr"
    recorder = Recorder(scenario, world, path, snapshot_every_events=256)
    end = recorder.finish(recorder.run())
    full_path = tmp_path / "full.ttr"
    plain, plain_world = _dp_world(None)
    full = Recorder(plain, plain_world, full_path, snapshot_every_events=256)
    assert full.finish(full.run())["hash_chain"] == end["hash_chain"]
    assert path.stat().st_size < full_path.stat().st_size
    with RecordingReader.open(path) as reader:
        manifests = reader.manifests()
        assert len(manifests) > 2
        middle = reader.restore(manifests[1], full_check=True)
        assert any(isinstance(array, ElidedArray) for array in _arrays(middle.nodes))
        final = reader.restore(manifests[-1], full_check=True)
        assert manifests[-1].final and final.state_hash() == end["state_hash"]
        assert not any(isinstance(array, ElidedArray) for array in _arrays(final.nodes))


def test_an_old_torch_recording_is_refused_in_one_line(tmp_path: Path) -> None:
    from timetravel.recording.writer import RecordingWriter

    header = {"format": [1, 1], "scenario": "torch", "config": {}, "seed": 0, "display_unit": "ms"}
    path = tmp_path / "old.ttr"
    RecordingWriter.create(path, header).close()
    with pytest.raises(RecordingError) as raised:
        RecordingReader.open(path)
    message = str(raised.value)
    assert "\n" not in message and "format 1.1" in message and "record the run again" in message
    plain = tmp_path / "plain.ttr"
    RecordingWriter.create(plain, {**header, "scenario": "gossip"}).close()
    RecordingReader.open(plain).close()  # other scenarios' 1.1 recordings still open
