"""Quiet snapshots: a snapshot where simulated time is about to jump (recording/recorder.py).

A 10,000-rank recording's seeks land mostly in the gaps between a step's bursts; the recorder takes
a snapshot at the start of each, so a seek there re-executes nothing. These tests record a 32-rank
tree with the node threshold lowered (QUIET_SNAPSHOT_NODES_MIN is for 10,000-rank worlds) and check
that the quiet snapshots are where the gaps start, hold the state a straight run has there, change
nothing else in the recording, and give every seek the state a recording without them gives.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from world_sources import reference_session

from timetravel.explore import Session
from timetravel.recording import RecordingReader, record_run
from timetravel.recording import recorder as recorder_module
from timetravel.scenarios import get_scenario
from timetravel.sim import Simulation
from timetravel.sim.runner import build_world

CONFIG = {"ranks": 32, "allreduce": "tree", "params": 256, "steps": 3, "fabric_level": "collective"}
INTERVAL = 128
GAP_NS = recorder_module.SNAPSHOT_QUIET_NS_DEFAULT


def _record(path: Path, quiet_ns: int | None) -> dict[str, Any]:
    scenario = get_scenario("dp_training")
    world = build_world(scenario, scenario.resolve_config(CONFIG), 4)
    recorder = recorder_module.Recorder(
        scenario, world, path, snapshot_every_events=INTERVAL, snapshot_quiet_ns=quiet_ns
    )
    return recorder.finish(recorder.run())


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(quiet snapshots on, off): the same run recorded twice."""
    folder = tmp_path_factory.mktemp("quiet")
    patch = pytest.MonkeyPatch()
    patch.setattr(recorder_module, "QUIET_SNAPSHOT_NODES_MIN", 1)
    try:
        _record(folder / "quiet.ttr", GAP_NS)
        _record(folder / "plain.ttr", 0)
    finally:
        patch.undo()
    return folder / "quiet.ttr", folder / "plain.ttr"


def _event_times(reader: RecordingReader) -> list[int]:
    return [event.t for batch in reader.event_batches() for event in reader.events(batch)]


def test_quiet_snapshots_fall_where_time_jumps_and_hold_a_straight_runs_state(
    recordings: tuple[Path, Path],
) -> None:
    quiet, plain = recordings
    with RecordingReader.open(quiet) as reader, RecordingReader.open(plain) as without:
        assert reader.header["snapshot_quiet_ns"] == GAP_NS
        assert without.header["snapshot_quiet_ns"] == 0
        assert {**(reader.end() or {}), "offset": 0} == {**(without.end() or {}), "offset": 0}
        assert [reader.events_bytes(b) for b in reader.event_batches()] == [
            without.events_bytes(b) for b in without.event_batches()
        ]
        plain_snapshots = {m.events for m in without.manifests()}
        added = [m for m in reader.manifests() if m.events not in plain_snapshots]
        assert plain_snapshots <= {m.events for m in reader.manifests()}
        times = _event_times(reader)
        assert len(added) >= 3  # one after each step's burst
        for manifest in added:
            assert manifest.events % INTERVAL, "an added snapshot off the interval"
            assert manifest.t_ns == times[manifest.events - 1]
            assert times[manifest.events] - manifest.t_ns >= GAP_NS
        # every gap of GAP_NS or more after enough events has one
        gaps = [n for n in range(1, len(times)) if times[n] - times[n - 1] >= GAP_NS]
        taken = sorted(m.events for m in reader.manifests())
        for n in gaps:
            before = max(e for e in taken if e <= n)
            assert before == n or n - before < INTERVAL // recorder_module.QUIET_SNAPSHOT_FRACTION
        scenario = get_scenario("dp_training")
        for manifest in added:
            world = build_world(scenario, scenario.resolve_config(CONFIG), 4)
            Simulation(scenario, world).run(max_events=manifest.events)
            restored = reader.restore(manifest)
            assert restored.state_hash() == world.state_hash() == manifest.state_hash
            assert restored.events_processed == manifest.events
            assert restored.chain_batch == world.chain_batch  # the open batch it carries


def test_every_seek_gives_the_state_a_recording_without_quiet_snapshots_gives(
    recordings: tuple[Path, Path],
) -> None:
    quiet, plain = recordings
    with RecordingReader.open(quiet) as reader:
        times = _event_times(reader)
        added = [m for m in reader.manifests() if m.events % INTERVAL and not m.final]
    end = times[-1]
    targets = [0, end // 3, end // 2, end - 1, end + 5]
    for manifest in added:
        targets += [manifest.t_ns, manifest.t_ns + 1, (manifest.t_ns + times[manifest.events]) // 2]
        targets += [times[manifest.events] - 1, times[manifest.events]]
    with Session.open(quiet) as session, reference_session(plain) as reference:
        for target in targets + targets[::-1]:
            assert session.goto(target) == reference.goto(target), target
            assert session.world.state_hash() == reference.world.state_hash(), target
        for number in (manifest.events for manifest in added):
            for event in (f"#{number - 1}", f"#{number}", f"#{number + 1}"):
                assert session.goto(event) == reference.goto(event), event
                assert session.world.state_hash() == reference.world.state_hash(), event
    for manifest in added:
        # a fresh session's first seek into the gap restores its quiet snapshot and runs nothing
        with Session.open(quiet) as session:
            session.goto((manifest.t_ns + times[manifest.events]) // 2)
            assert session.last_replay_events == 0
            assert session.world.events_processed == manifest.events


def test_pausing_at_multiples_of_time_changes_nothing_in_the_run() -> None:
    scenario = get_scenario("dp_training")
    config = scenario.resolve_config(CONFIG)
    straight = build_world(scenario, config, 4)
    straight_result = Simulation(scenario, straight).run()
    paused = build_world(scenario, config, 4)
    pauses: list[tuple[int, int, int]] = []

    def on_pause(simulation: Simulation) -> None:
        world = simulation.world
        pauses.append((world.events_processed, world.t_ns, world.queue[0][0] if world.queue else -1))

    result = Simulation(scenario, paused).run(pause_every_ns=GAP_NS // 4, on_pause=on_pause)
    assert (result.events, result.t_end_ns) == (straight_result.events, straight_result.t_end_ns)
    assert paused.state_hash() == straight.state_hash()
    assert paused.chain_digest == straight.chain_digest
    step = GAP_NS // 4
    assert len(pauses) >= 3
    assert len({events for events, _t, _next in pauses}) == len(pauses)  # each pause ran something
    for _events, t_ns, next_t in pauses:
        # a pause sits at a multiple of the step: every event up to it ran, the next one is past it
        assert next_t > -(-t_ns // step) * step >= t_ns


SUBPROCESS = """
import sys
from pathlib import Path
from timetravel.recording import recorder, record_run
from timetravel.scenarios import get_scenario
recorder.QUIET_SNAPSHOT_NODES_MIN = 1
scenario = get_scenario("dp_training")
config = scenario.resolve_config({config!r})
record_run(scenario, config, 4, Path(sys.argv[1]), snapshot_every_events={interval})
"""


def test_a_recording_with_quiet_snapshots_is_the_same_bits_in_another_process(tmp_path: Path) -> None:
    paths = []
    for hash_seed in ("1", "987"):
        path = tmp_path / f"quiet-{hash_seed}.ttr"
        code = SUBPROCESS.format(config=CONFIG, interval=INTERVAL)
        environment = dict(os.environ, PYTHONHASHSEED=hash_seed)
        completed = subprocess.run(
            [sys.executable, "-c", code, str(path)], env=environment, capture_output=True, text=True
        )
        assert completed.returncode == 0, completed.stderr
        paths.append(path)
    assert paths[0].read_bytes() == paths[1].read_bytes()
    with RecordingReader.open(paths[0]) as reader:
        assert any(m.events % INTERVAL for m in reader.manifests() if not m.final)


def test_small_worlds_take_no_quiet_snapshots(tmp_path: Path) -> None:
    """Below QUIET_SNAPSHOT_NODES_MIN nodes the interval alone places snapshots (the demo's many
    gaps would multiply its snapshots), and the header says so."""
    scenario = get_scenario("dp_training")
    report, _world = record_run(
        scenario, scenario.resolve_config(CONFIG), 4, tmp_path / "small.ttr", snapshot_every_events=INTERVAL
    )
    with RecordingReader.open(tmp_path / "small.ttr") as reader:
        assert reader.header["snapshot_quiet_ns"] == 0
        assert all(m.events % INTERVAL == 0 for m in reader.manifests() if not m.final)
    assert report["recording"]["snapshots"] == len(reader.manifests())
