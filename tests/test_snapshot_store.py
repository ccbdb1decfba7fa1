"""The copy-on-write snapshot store: exact hashes, exact restores, sharing, memory, the page codec."""

from __future__ import annotations

import itertools
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from scenario_fixtures import FLOATS

from timetravel.scenarios import get_scenario
from timetravel.sim import Simulation
from timetravel.sim.event import Event
from timetravel.sim.runner import build_world
from timetravel.sim.world import METRIC_CHUNK_ENTRIES, World
from timetravel.snapshot import Snapshot, SnapshotStore, restore
from timetravel.snapshot.assemble import PART_ORDER
from timetravel.snapshot.codec import (
    CODEC_RAW,
    CODEC_SHUFFLE,
    CODEC_XOR_SHUFFLE,
    decode_page,
    encode_page,
    shuffle,
    unshuffle,
)


def run_with_snapshots(
    scenario: Any, config: dict[str, Any], seed: int, every: int, store: SnapshotStore
) -> tuple[World, list[tuple[Snapshot, str]]]:
    """Run to the end taking a snapshot every ``every`` events; (snapshot, world hash then)."""
    world = build_world(scenario, config, seed)
    batches: list[list[Event]] = []
    simulation = Simulation(
        scenario, world, on_chain_batch=lambda _first, events, _digest: batches.append(events)
    )
    taken = [(store.take(world), world.state_hash())]

    def pause(_simulation: Simulation) -> None:
        taken.append((store.take(world, [*batches, world.chain_batch]), world.state_hash()))
        batches.clear()

    simulation.run(pause_every_events=every, on_pause=pause)
    return world, taken


def test_part_order_is_the_worlds() -> None:
    world = build_world(get_scenario("pingpong"), get_scenario("pingpong").resolve_config({}), 1)
    assert [name for name, _digest in world.part_digests()] == list(PART_ORDER)


@pytest.mark.parametrize("scenario_name", ["gossip", "floats"])
def test_every_snapshot_hashes_like_the_world_and_restores_to_it(scenario_name: str) -> None:
    scenario = FLOATS if scenario_name == "floats" else get_scenario("gossip")
    settings = {"steps": 60} if scenario_name == "floats" else {"nodes": 40, "rumors": 10}
    store = SnapshotStore()
    every = 40 if scenario_name == "floats" else 100
    _world, taken = run_with_snapshots(scenario, scenario.resolve_config(settings), 2, every, store)
    assert len(taken) > 5
    for snapshot, world_hash in taken:
        assert snapshot.state_hash == world_hash
        restored = restore(snapshot)
        assert restored.state_hash() == world_hash
        assert restored.events_processed == snapshot.events


def test_restored_world_runs_on_exactly_like_the_original() -> None:
    scenario = get_scenario("gossip")
    config = scenario.resolve_config({"nodes": 30, "rumors": 8})
    store = SnapshotStore()
    final_world, taken = run_with_snapshots(scenario, config, 4, 300, store)
    middle, _hash = taken[len(taken) // 2]
    resumed = restore(middle)
    Simulation(scenario, resumed).run()
    assert resumed.state_hash() == final_world.state_hash()


def test_nodes_that_did_not_run_share_the_previous_blob() -> None:
    store = SnapshotStore()
    world = build_world(FLOATS, FLOATS.resolve_config({"steps": 50}), 1)
    first = store.take(world)
    Simulation(FLOATS, world).run(max_events=1)
    assert [event.dst for event in world.chain_batch] == ["t0"]
    second = store.take(world, [world.chain_batch])
    assert second.state_hash == world.state_hash()
    for name in ("t1", "t2", "t3", "ps"):
        assert second.nodes[name] is first.nodes[name]
    assert second.nodes["t0"] is not first.nodes["t0"]
    old_pages = [page for array in first.nodes["t0"].arrays for page in array.pages]
    new_pages = [page for array in second.nodes["t0"].arrays for page in array.pages]
    # weights: 160,000 bytes in 3 pages, all updated; moment: 80,000 bytes in 2 pages, of which
    # a step touches only the first 8,000 bytes, so its second page is shared
    shared = [new is old for new, old in zip(new_pages, old_pages, strict=True)]
    assert shared == [False, False, False, False, True]
    assert second.bytes_new < first.bytes_new / 3


def test_unchanged_pages_of_a_changed_array_are_shared() -> None:
    store = SnapshotStore()
    world = World("arrays", {}, 0)
    world.add_node("a", "r", {"big": np.zeros(3 * 16384, dtype=np.float32)})
    first = store.take(world)
    world.nodes["a"]["big"][20000] = 1.0
    world.events_processed += 1
    second = store.take(world, [[Event(0, 0, "a", "k", None)]])
    old_pages = first.nodes["a"].arrays[0].pages
    new_pages = second.nodes["a"].arrays[0].pages
    assert [new is old for new, old in zip(new_pages, old_pages, strict=True)] == [True, False, True]
    assert second.bases[id(new_pages[1])] is old_pages[1]
    assert restore(second).nodes["a"]["big"][20000] == 1.0


def test_old_queue_generations_are_reused_until_one_of_their_events_runs() -> None:
    store = SnapshotStore()
    _world, taken = run_with_snapshots(FLOATS, FLOATS.resolve_config({"steps": 40}), 1, 50, store)
    oldest = [snapshot.queue[0] for snapshot, _hash in taken[1:-1]]
    assert all(chunk.seq_low == 0 for chunk in oldest)
    assert all(chunk.blob is oldest[0].blob for chunk in oldest)
    assert [event.kind for event in oldest[0].events] == ["audit"]


def test_full_metric_chunks_are_reused() -> None:
    store = SnapshotStore()
    _world, taken = run_with_snapshots(FLOATS, FLOATS.resolve_config({"steps": 300}), 1, 40, store)
    with_two_chunks = [
        snapshot for snapshot, _hash in taken if len(snapshot.metrics.get("loss", (0, ()))[1]) == 2
    ]
    assert len(with_two_chunks) >= 2
    first_chunks = {id(snapshot.metrics["loss"][1][0]) for snapshot in with_two_chunks}
    assert len(first_chunks) == 1
    assert with_two_chunks[-1].metrics["loss"][0] > METRIC_CHUNK_ENTRIES


def test_memory_budget_is_counted_exactly_and_thins_far_snapshots_first() -> None:
    budget = 3_000_000
    store = SnapshotStore(bytes_max=budget)
    world = build_world(FLOATS, FLOATS.resolve_config({"steps": 200}), 1)
    batches: list[list[Event]] = []
    simulation = Simulation(FLOATS, world, on_chain_batch=lambda _f, events, _d: batches.append(events))
    store.take(world)

    def pause(_simulation: Simulation) -> None:
        store.take(world, [*batches, world.chain_batch])
        batches.clear()
        assert store.bytes_held == store.counted_bytes()
        assert store.bytes_held <= budget or len(store.snapshots) == 1

    simulation.run(pause_every_events=16, on_pause=pause)
    assert store.thinned > 10
    events = [snapshot.events for snapshot in store.snapshots]
    gaps = [later - earlier for earlier, later in itertools.pairwise(events)]
    assert events[-1] == store.snapshots[-1].events
    assert gaps[-1] <= gaps[0]
    assert min(gaps[len(gaps) // 2 :]) <= min(gaps[: len(gaps) // 2])
    for snapshot in store.snapshots:
        assert restore(snapshot).state_hash() == snapshot.state_hash


def test_budget_zero_keeps_only_the_latest() -> None:
    store = SnapshotStore(bytes_max=0)
    _world, taken = run_with_snapshots(
        get_scenario("gossip"), {"nodes": 20, "rumors": 5, **_gossip_rest()}, 1, 200, store
    )
    assert len(store.snapshots) == 1
    assert store.snapshots[0] is taken[-1][0]
    assert store.bytes_held == store.counted_bytes()


def _gossip_rest() -> dict[str, Any]:
    return {
        key: value
        for key, value in get_scenario("gossip").defaults().items()
        if key not in ("nodes", "rumors")
    }


def test_restored_event_payload_arrays_are_read_only_and_node_arrays_writeable() -> None:
    store = SnapshotStore()
    world = World("payloads", {}, 0)
    world.add_node("a", "r", {"w": np.ones(4, dtype=np.float64)})
    frozen = np.arange(3.0)
    frozen.flags.writeable = False
    world.schedule(5, "a", "k", frozen)
    restored = restore(store.take(world))
    assert not restored.queue[0].payload.flags.writeable
    assert restored.nodes["a"]["w"].flags.writeable
    assert restored.state_hash() == world.state_hash()


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_float_pages_round_trip_through_xor_and_shuffle(dtype: str) -> None:
    kind = np.dtype(ml_dtypes.bfloat16) if dtype == "bfloat16" else np.dtype(dtype)
    generator = np.random.default_rng(1)
    base = generator.standard_normal(4096).astype(kind)
    updated = (base.astype(np.float64) * (1 + 1e-3 * generator.standard_normal(4096))).astype(kind)
    codec, payload = encode_page(updated.tobytes(), dtype, base.tobytes())
    assert codec == CODEC_XOR_SHUFFLE
    assert decode_page(codec, payload, kind.itemsize, base.tobytes()) == updated.tobytes()
    codec, payload = encode_page(updated.tobytes(), dtype, None)
    assert codec == CODEC_SHUFFLE
    assert decode_page(codec, payload, kind.itemsize, None) == updated.tobytes()


def test_integer_pages_are_stored_raw_and_shuffle_inverts() -> None:
    assert encode_page(b"\x01\x02\x03\x04", "int32", b"\x00" * 4) == (CODEC_RAW, b"\x01\x02\x03\x04")
    data = bytes(range(32))
    assert shuffle(data, 4)[:8] == bytes([0, 4, 8, 12, 16, 20, 24, 28])
    assert unshuffle(shuffle(data, 4), 4) == data


def test_every_allow_listed_dtype_snapshots_and_restores() -> None:
    store = SnapshotStore()
    world = World("dtypes", {}, 0)
    state: dict[str, Any] = {}
    for name in (
        "bool",
        "int8",
        "uint16",
        "int64",
        "float16",
        "float32",
        "float64",
        "complex64",
        "complex128",
    ):
        state[name] = np.arange(24).reshape(4, 6).astype(name)
    state["bfloat16"] = np.linspace(-2, 2, 24).astype(ml_dtypes.bfloat16).reshape(2, 12)
    state["bfloat16_paged"] = np.ones(70_000, dtype=ml_dtypes.bfloat16)
    state["strided"] = np.arange(40.0).reshape(8, 5)[:, 1:3]
    world.add_node("a", "r", state)
    restored = restore(store.take(world))
    assert restored.state_hash() == world.state_hash()
    for name, array in state.items():
        if name == "_choices":
            continue
        again = restored.nodes["a"][name]
        assert again.dtype == array.dtype and again.shape == array.shape
        assert again.tobytes() == np.ascontiguousarray(array).tobytes()


def test_stored_events_in_one_loop_are_what_each_stored_event_gives() -> None:
    from timetravel.sim.encoding import DecodeError
    from timetravel.snapshot.assemble import stored_event, stored_events

    common = [[5, 1, "r0", "ping", None], [5, 2, "r1", "timer", [1, "x"]]]
    unusual = [
        (7, 3, "r2", "k", 0),
        [True, 4, "r3", "k", 0],
        Event(9, 5, "r4", "k", 0),
    ]  # tuple, bool t, Event
    events = stored_events(common + unusual)
    assert events == [stored_event(data) for data in common + unusual]
    assert all(type(event) is Event for event in events) and events[0].kind == "ping"
    for bad in ([1, 2, "r0", "k"], [1, 2, 3, "k", None], "r0", [1.5, 2, "r0", "k", None]):
        with pytest.raises(DecodeError):
            stored_event(bad)
        with pytest.raises(DecodeError):
            stored_events([*common, bad])


def test_a_recorded_batch_refuses_an_event_of_another_form_as_before() -> None:
    from timetravel.recording.reader import _event
    from timetravel.sim.encoding import DecodeError
    from timetravel.sim.event import events_from_lists

    good = [[5, 1, "r0", "ping", None], [True, 2, "r1", "k", 0]]  # a bool time passes isinstance, as before
    assert events_from_lists(good, _event) == [_event(data) for data in good]
    for bad, message in (([1, 2, "r0", "k"], "list of 5 fields"), ([1, 2, 3, "k", None], "wrong types")):
        with pytest.raises(DecodeError, match=message):
            events_from_lists([*good, bad], _event)
