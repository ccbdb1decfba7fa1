"""Seeks that share decoded node states (recording/shared_nodes.py, explore/seek_nodes.py).

What a user relies on: after any move, the Session's world is bit for bit the world a full decode
of the snapshot and a re-execution give (its state hash recomputed from scratch), however many
seeks came before and in whatever order; a recording whose handlers broke the own-node rule, or
a re-execution that diverged, never leaves a stale state behind.
"""

from __future__ import annotations

import gc
import os
import random
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scenario_fixtures import NONDETERMINISTIC, TRESPASSER
from world_sources import record_tree32, reference_session

from timetravel.explore import ReplayDivergence, Session, seek_nodes
from timetravel.explore.seek_nodes import nodes_run, worth_sharing
from timetravel.explore.world_source import RecordedWorlds
from timetravel.recording import record_run, speedups
from timetravel.recording.catalog import EventBatchInfo
from timetravel.recording.format import RecordingError
from timetravel.scenarios import get_scenario
from timetravel.sim.encoding import pack


@pytest.fixture(autouse=True)
def share_small_worlds(monkeypatch: pytest.MonkeyPatch) -> None:
    """These recordings are small, so that the tests are fast: share in them as in a 10,000-rank one."""
    monkeypatch.setattr(seek_nodes, "SHARED_NODES_MIN", 0)
    monkeypatch.setattr(seek_nodes, "SHARED_TOUCHED_FRACTION_MAX", 1.0)


@pytest.fixture(scope="module")
def training_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    path, report = record_tree32(tmp_path_factory.mktemp("seek-shared"))
    assert report["recording"]["snapshots"] >= 5
    return path, report


@pytest.fixture(scope="module")
def gossip_recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    scenario = get_scenario("gossip")
    config = scenario.resolve_config({"nodes": 64, "rumors": 12})
    path = tmp_path_factory.mktemp("seek-shared") / "gossip64.ttr"
    report, _world = record_run(scenario, config, 7, path, snapshot_every_events=256)
    return path, report


def _moves(report: dict[str, Any], seed: int) -> list[str]:
    rng = random.Random(seed)
    moves = [str(rng.randrange(0, report["t_end_ns"])) + "ns" for _ in range(14)]
    moves += [f"#{rng.randrange(1, report['events'])}" for _ in range(8)]
    moves[5:5] = [moves[2], moves[2]]  # the same target twice: the second seek shares the most
    moves[9:9] = ["end", "start", moves[0]]
    return moves


@pytest.mark.parametrize("which", ["training_recording", "gossip_recording"])
def test_every_move_gives_the_world_a_full_decode_gives(which: str, request: pytest.FixtureRequest) -> None:
    path, report = request.getfixturevalue(which)
    with Session.open(path) as session, reference_session(path) as reference:
        for move in _moves(report, 3):
            assert session.goto(move) == reference.goto(move), move
            assert session.world.state_hash() == reference.world.state_hash(), move
            for count in (1, 40):
                assert session.step(count) == reference.step(count)
                assert session.world.state_hash() == reference.world.state_hash(), (move, "step", count)
            assert session.back(7) == reference.back(7)
            assert session.world.state_hash() == reference.world.state_hash(), (move, "back")
        assert session.world_copy().state_hash() == reference.world.state_hash()


def test_a_repeated_seek_decodes_only_the_nodes_it_runs(training_recording: tuple[Path, Any]) -> None:
    path, report = training_recording
    target = report["t_end_ns"] // 2
    with Session.open(path) as session:
        session._parked.count_max = 0  # no former world to go back to: the seek restores and shares
        session.goto(target)
        session.goto("start")
        session.goto(target)
        shared = session.source._shared_nodes  # type: ignore[attr-defined]
        assert shared is not None and shared.decoded_shared == 0
        nodes = len(session.world.nodes)
        assert 0 < shared.decoded_private < nodes
        # at a snapshot nothing runs: every node is its shared decoded state, arrays read-only
        session.goto(f"#{session.snapshots()[3].events}")
        assert session.last_replay_events == 0
        outside = [name for name in session._shared if isinstance(session.world.nodes[name], dict)]
        assert len(outside) == nodes
        arrays = [
            value
            for name in outside
            for value in session.world.nodes[name].values()
            if isinstance(value, np.ndarray)
        ]
        assert arrays and not any(array.flags.writeable for array in arrays)


def test_branches_and_copies_still_get_fully_private_worlds(training_recording: tuple[Path, Any]) -> None:
    path, report = training_recording
    with Session.open(path) as session:
        session.goto(report["t_end_ns"] // 3)
        copy = session.world_copy()
        restored = session.snapshot_world(2)
    for world in (copy, restored):
        arrays = [v for state in world.nodes.values() if isinstance(state, dict) for v in state.values()]
        assert all(v.flags.writeable for v in arrays if isinstance(v, np.ndarray))


def test_a_recording_whose_handler_broke_the_rule_is_not_shared(tmp_path: Path) -> None:
    path = tmp_path / "trespasser.ttr"
    record_run(TRESPASSER, {}, 1, path, snapshot_every_events=64)
    with Session.open(path, scenario=TRESPASSER) as session:
        assert not session._may_share
        session.goto("#300")
        assert session._shared == {}


def test_a_divergence_forgets_every_shared_state(tmp_path: Path) -> None:
    path = tmp_path / "nondeterministic.ttr"
    record_run(NONDETERMINISTIC, NONDETERMINISTIC.resolve_config({}), 1, path, snapshot_every_events=512)
    with Session.open(path, scenario=NONDETERMINISTIC) as session:
        assert session._may_share
        with pytest.raises(ReplayDivergence):
            session.goto("#3000")
        shared = session.source._shared_nodes  # type: ignore[attr-defined]
        assert shared is None or (shared.bytes_held == 0 and not shared._states)


def _batch(first: int, count: int) -> EventBatchInfo:
    return EventBatchInfo(first=first, count=count, offset=0, digest=b"", partial=False)


class _Events:
    """A stand-in reader: batch ``first`` holds events to nodes n<first+i> at times 10*(first+i)."""

    def events(self, batch: EventBatchInfo) -> list[Any]:
        from timetravel.sim.event import Event

        return [
            Event(10 * (batch.first + i + 1), 0, f"n{batch.first + i + 1}", "k", None)
            for i in range(batch.count)
        ]


def test_nodes_run_reads_the_recorded_destinations_or_says_it_cannot() -> None:
    reader: Any = _Events()
    batches = [_batch(0, 4), _batch(4, 4), _batch(8, 4)]
    assert nodes_run(reader, batches, 2, until_ns=None, events_max=6, end=12) == {"n3", "n4", "n5", "n6"}
    # by time: every event with t <= until, and the first one after it
    assert nodes_run(reader, batches, 0, until_ns=35, events_max=12, end=12) == {"n1", "n2", "n3", "n4"}
    assert nodes_run(reader, batches, 5, until_ns=None, events_max=5, end=12) == set()
    # the last recorded event runs: the end-of-run checks may read any node
    assert nodes_run(reader, batches, 6, until_ns=None, events_max=12, end=12) is None
    assert nodes_run(reader, batches, 6, until_ns=None, events_max=11, end=12) == {
        f"n{i}" for i in range(7, 12)
    }
    # a gap between batches
    assert nodes_run(reader, [_batch(0, 4), _batch(5, 4)], 2, until_ns=None, events_max=7, end=9) is None


def test_small_worlds_and_seeks_that_run_most_nodes_decode_every_node(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.undo()
    assert seek_nodes.SHARED_NODES_MIN == 4096
    assert worth_sharing(10_000, {f"r{i}" for i in range(1_800)})
    assert not worth_sharing(10_000, {f"r{i}" for i in range(6_000)})
    assert not worth_sharing(1_024, {"n1"})
    assert not worth_sharing(10_000, None)


def test_a_small_recording_is_not_shared_by_default(
    gossip_recording: tuple[Path, dict[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.undo()
    path, report = gossip_recording
    with Session.open(path) as session:
        session.goto(report["t_end_ns"] // 2)
        assert session._shared == {}
        assert session.source._shared_nodes is None  # type: ignore[attr-defined]


@pytest.mark.slow
def test_a_large_recording_shares_at_the_default_thresholds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Above SHARED_NODES_MIN, with the thresholds as shipped: every seek's world equals a full decode."""
    monkeypatch.undo()
    size = os.environ.get("TIMETRAVEL_SLOW", "ci")
    ranks, seeks = (4_200, 6) if size != "full" else (10_000, 20)
    scenario = get_scenario("dp_training")
    config = scenario.resolve_config({"ranks": ranks, "allreduce": "tree", "params": 256, "steps": 1})
    path = tmp_path / "tree.ttr"
    report, _world = record_run(scenario, config, 0, path)
    rng = random.Random(1)
    shared_seeks = 0
    with Session.open(path) as session, reference_session(path) as reference:
        for _ in range(seeks):
            target = rng.randrange(0, report["t_end_ns"])
            assert session.goto(target) == reference.goto(target)
            shared_seeks += bool(session._shared)
            assert session.world.state_hash() == reference.world.state_hash()
            assert session.step(3) == reference.step(3)
            assert session.world.state_hash() == reference.world.state_hash()
    assert shared_seeks > 0


def _containers(value: Any) -> list[Any]:
    """Every dict and list inside a plain-data value, the value itself included."""
    found = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            found.append(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            found.append(item)
            stack.extend(item)
    return found


def test_decoded_states_are_out_of_the_collectors_reach_and_stay_writeable(
    training_recording: tuple[Path, Any],
) -> None:
    """The collector walked every shared state after a first seek into a snapshot (170-330 ms at
    10,000 ranks) and again in a full collection (610-800 ms) though plain data has no cycles: the
    compiled core untracks them. The private states a seek decodes for the re-execution are built
    untracked too (a young collection after each seek walked their ~75,000 containers, 20-45 ms);
    they are still ordinary writeable values, equal to the reader's fresh decode, and what a
    handler puts in them is tracked as usual."""
    path, report = training_recording
    with Session.open(path) as session:
        session.goto(report["t_end_ns"] // 2)
        assert session.last_replay_events > 0
        shared_names = set(session._shared)
        private_names = [name for name in session.world.nodes if name not in shared_names]
        assert shared_names and private_names
        shared = [c for name in shared_names for c in _containers(session.world.nodes[name])]
        assert any(isinstance(c, list) for c in shared)
        untracked = speedups.compiled is not None
        assert all(gc.is_tracked(c) != untracked for c in shared if isinstance(c, list))
        source = session.source
        assert isinstance(source, RecordedWorlds)
        digest = dict(session.reader.node_digests(session.snapshots_info[1]))["r0"]
        private = source.private_value(digest)
        assert pack(private) == pack(session.reader.value(digest))
        lists = [c for c in _containers(private) if isinstance(c, list)]
        assert lists and all(gc.is_tracked(c) != untracked for c in lists)
        arrays = [value for value in private.values() if isinstance(value, np.ndarray)]
        assert arrays and all(array.flags.writeable for array in arrays)
        private["added"] = {"a": [1]}
        assert gc.is_tracked(private["added"]) and gc.is_tracked(private)


def test_the_open_world_is_shared_and_a_step_from_it_runs_private_states(
    training_recording: tuple[Path, dict[str, Any]],
) -> None:
    """Session.open starts the cursor on shared states (read-only, their small containers shared
    between ranks): stepping from it decodes afresh every node it runs, whatever source serves the
    session by then, so no shared state is ever written."""
    path, _report = training_recording
    with Session.open(path) as session, reference_session(path) as reference:
        assert set(session._shared) == set(session.world.nodes)
        assert session.world.state_hash() == reference.world.state_hash()
        held = {name: pack(state) for name, state in session.world.nodes.items()}
        # up to just before the next snapshot, so that the step runs from the open world
        count = next(m.events for m in session.snapshots_info if m.events > 0) - 1
        session.step(count)
        reference.step(count)
        assert session.last_replay_events == count
        assert session.world.state_hash() == reference.world.state_hash()
        shared_states = session.source._shared_nodes  # type: ignore[attr-defined]
        assert session._shared and len(session._shared) < len(session.world.nodes)
        for name, digest in session._shared.items():
            assert pack(session.world.nodes[name]) == held[name]
            assert shared_states._states[digest][0] is session.world.nodes[name]


def test_a_shared_restore_checks_the_manifest_it_builds_the_nodes_from(
    training_recording: tuple[Path, Any],
) -> None:
    """The shared path builds a world's nodes from the manifest's node list itself (not through the
    reader's per-node callback): a list whose digests do not add up to the snapshot's state hash,
    or that is not a list of (name, 16-byte digest) pairs, is still refused with one line."""
    path, _report = training_recording
    with Session.open(path) as session:
        source = session.source
        assert isinstance(source, RecordedWorlds)
        reader = session.reader
        info = session.snapshots_info[3]
        manifest = reader.manifest(info)  # the cached payload every restore of it reads
        listed = manifest["nodes"]
        (first, first_digest), (second, second_digest) = listed[0], listed[1]
        manifest["nodes"] = [[first, second_digest], [second, first_digest], *listed[2:]]
        with pytest.raises(RecordingError, match="do not add up to its state hash"):
            source.restore_shared(info, set())
        other = session.snapshots_info[4]
        reader.manifest(other)["nodes"] = [[first, b"short"]]
        with pytest.raises(RecordingError, match="manifest is malformed"):
            source.restore_shared(other, set())


def test_a_restore_remembers_only_the_root_checks_that_passed(training_recording: tuple[Path, Any]) -> None:
    path, _report = training_recording
    with Session.open(path) as session:
        reader = session.reader
        info = session.snapshots_info[2]
        assert reader.restore(info, full_check=True).state_hash() == info.state_hash
        assert info.offset in reader._roots_checked
        # a later restore skips the root (the same checksummed frame) and gives the same world
        assert reader.restore(info, full_check=True).state_hash() == info.state_hash
        forged = session.snapshots_info[4]
        manifest = reader.manifest(forged)
        manifest["nodes"] = list(reversed(manifest["nodes"]))
        for _attempt in range(2):
            with pytest.raises(RecordingError, match="do not add up to its state hash"):
                reader.restore(forged)
        assert forged.offset not in reader._roots_checked


def test_what_the_reader_keeps_for_later_seeks_is_out_of_the_collectors_reach(
    training_recording: tuple[Path, Any],
) -> None:
    """Cached manifests (a node list of 10,000 pairs at 10,000 ranks), array headers, decoded event
    batches and queue chunks were most of the ~290,000 tracked objects every full collection during
    a seek walked: they are read-only plain data, untracked when cached (with the compiled core),
    and the same values."""
    path, report = training_recording
    with Session.open(path) as session:
        session.goto(report["t_end_ns"] // 2)
        reader = session.reader
        info = session.snapshots_info[1]
        manifest = reader.manifest(info)
        untracked = speedups.compiled is not None
        assert all(gc.is_tracked(c) != untracked for c in _containers(manifest))
        assert reader.node_digests(info) == [(str(name), digest) for name, digest in manifest["nodes"]]
        weights = next(v for v in session.world.nodes["r0"].values() if isinstance(v, np.ndarray))
        headers = list(reader._array_headers.items.values())
        assert headers and all(gc.is_tracked(header) != untracked for header, _nbytes in headers)
        assert weights.dtype.name in {header[0] for header, _nbytes in headers}
        batch = session.event_batches[0]
        kept = reader.events(batch)
        assert kept and all(gc.is_tracked(event) != untracked for event in kept)
        assert [event.t for event in kept] == [
            session.event(batch.first + 1 + i).t_ns for i in range(len(kept))
        ]  # type: ignore[union-attr]
        chunks = session.source._shared_nodes._chunks  # type: ignore[attr-defined]
        assert chunks and all(gc.is_tracked(e) != untracked for events in chunks.values() for e in events)


def test_a_seek_leaves_no_collection_due_for_the_next_call(tmp_path: Path, monkeypatch: Any) -> None:
    """What a paused seek allocated is promoted unscanned: the next call does not start with a
    young collection (or a full one) of the seek's thousands of containers."""
    from timetravel.explore import seek_gc

    monkeypatch.setattr(seek_gc, "SEEK_YOUNG_PROMOTED_MIN", 0)  # 32 ranks allocate fewer
    path, _report = record_tree32(tmp_path)
    collected: list[int] = []

    def note(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            collected.append(info["generation"])

    with Session.open(path) as session:
        gc.collect()  # nothing young before the seek
        gc.callbacks.append(note)
        try:
            session.goto(session.end.t_ns // 2)  # a restore: thousands of new containers
            assert gc.isenabled() and gc.get_count()[0] == 0
            kept = [{"i": index} for index in range(500)]  # fewer than the young threshold (700)
        finally:
            gc.callbacks.remove(note)
    assert collected == [] and len(kept) == 500
