"""What ran since a snapshot, gathered batch by batch (snapshot/changes.py), against the batches kept.

A recorder adds each chain batch to a Changes as the kernel flushes it; a snapshot taken from those
changes must be the snapshot taken from the kept batches — the same hash, the same blobs created in
the same order (the order is the recording's bytes) — whether or not the snapshot interval is a
multiple of the chain batch, and a Changes that does not cover exactly the events since the
snapshot is refused.
"""

from __future__ import annotations

from typing import Any

import pytest

from timetravel.scenarios import get_scenario
from timetravel.sim import Simulation
from timetravel.sim.event import Event
from timetravel.sim.runner import build_world
from timetravel.snapshot import Changes, SnapshotError, SnapshotStore
from timetravel.snapshot.changes import dirty_nodes, last_events


def _snapshots(every: int, chain_batch_events: int, gathered: bool) -> list[tuple[str, list[Any]]]:
    """Gossip with a snapshot every ``every`` events: (state hash, digests of the blobs it created)."""
    scenario = get_scenario("gossip")
    world = build_world(scenario, scenario.resolve_config({"nodes": 24, "rumors": 6}), 3)
    store = SnapshotStore(verify=True)
    kept: list[list[Event]] = []
    changes: list[Changes] = []

    def on_batch(first: int, events: list[Event], _digest: bytes) -> None:
        if gathered:
            changes[0].add(events, first)
        else:
            kept.append(events)

    simulation = Simulation(scenario, world, chain_batch_events=chain_batch_events, on_chain_batch=on_batch)
    taken = []

    def take(_simulation: Simulation | None = None) -> None:
        if not store.snapshots:
            snapshot = store.take(world)
        elif gathered:
            changes[0].add(world.chain_batch, world.chain_events)
            snapshot = store.take(world, changes=changes[0])
        else:
            snapshot = store.take(world, [*kept, world.chain_batch])
            kept.clear()
        changes[:] = [Changes(snapshot.seq, snapshot.events)]
        taken.append((snapshot.state_hash, [item.digest for item in snapshot.new_items]))

    take()
    simulation.run(pause_every_events=every, on_pause=take)
    return taken


@pytest.mark.parametrize(("every", "chain_batch_events"), [(64, 32), (50, 32), (37, 100)])
def test_a_snapshot_from_gathered_changes_is_the_one_from_kept_batches(
    every: int, chain_batch_events: int
) -> None:
    gathered = _snapshots(every, chain_batch_events, gathered=True)
    kept = _snapshots(every, chain_batch_events, gathered=False)
    assert len(gathered) > 5
    assert gathered == kept


def _events(first_seq: int, count: int, nodes: list[str]) -> list[Event]:
    return [
        Event(10 * seq, seq, nodes[seq % len(nodes)], "k", None)
        for seq in range(first_seq, first_seq + count)
    ]


def test_a_batch_that_straddles_the_snapshot_is_cut_at_it() -> None:
    """A snapshot after 5 events: a batch holding events 4..9 adds only 6..9 (the last four)."""
    batch = _events(3, 6, ["a", "b", "c"])
    changes = Changes(seq_before=7, events_at=5)
    changes.add(batch, first=3)
    expected = last_events([batch], 4)
    assert changes.events == 4
    assert changes.nodes == dirty_nodes(expected)
    assert changes.seqs_ran == [seq for _t, seq, *_rest in expected[0] if seq < 7]
    assert list(changes.nodes) == ["c", "a", "b"]  # first-event order, never a set's


def test_changes_that_do_not_cover_the_events_since_the_snapshot_are_refused() -> None:
    changes = Changes(seq_before=4, events_at=0)
    changes.add(_events(0, 3, ["a"]))
    with pytest.raises(SnapshotError, match="1 processed events are missing"):
        changes.check(seq_before=4, events_since=4)
    with pytest.raises(SnapshotError, match="hold 3 events, the world processed 2"):
        changes.check(seq_before=4, events_since=2)
    with pytest.raises(SnapshotError, match="since the snapshot at seq 4, the latest is at seq 9"):
        changes.check(seq_before=9, events_since=3)
    with pytest.raises(SnapshotError, match="older than the latest snapshot"):
        changes.check(seq_before=4, events_since=-1)
    changes.check(seq_before=4, events_since=3)


def _gathered(batches: list[tuple[list[Any], int | None]], seq_before: int, events_at: int) -> Changes:
    changes = Changes(seq_before=seq_before, events_at=events_at)
    for events, first in batches:
        changes.add(events, first)
    return changes


def test_the_compiled_loop_gathers_what_the_python_one_gathers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Changes.add's compiled loop (snapshot/_speedups_changes.h changes_add): the same nodes in the same
    order, the same seqs, the same count, for Events, plain tuples and decoded lists, seqs beyond
    64 bits, and a batch cut at the snapshot."""
    from timetravel.snapshot import changes as changes_module
    from timetravel.snapshot import speedups

    if speedups.compiled is not None:
        assert changes_module._changes_add is not None  # a built core runs the compiled loop
    huge = 2**70
    batches: list[tuple[list[Any], int | None]] = [
        (list(_events(3, 6, ["c", "a", "b"])), 3),
        ([(1, 8, "d", "k", None), [2, 2, "a", "k", [1, 2]], (3, huge, "e", "k", None)], None),
        ([(4, 1, "b", "k", None), (5, 9, "f", "k", None)], 12),
        ([], None),
    ]
    for seq_before in (7, huge + 1):
        compiled = _gathered(batches, seq_before, events_at=5)
        monkeypatch.setattr(changes_module, "_changes_add", None)
        python = _gathered(batches, seq_before, events_at=5)
        monkeypatch.undo()
        assert (list(compiled.nodes), compiled.seqs_ran, compiled.events) == (
            list(python.nodes),
            python.seqs_ran,
            python.events,
        )
    assert list(compiled.nodes) == ["b", "c", "a", "d", "e", "f"]
    assert compiled.events == 4 + 3 + 2


def test_an_event_whose_node_cannot_be_a_key_is_refused_as_python_refuses_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from timetravel.snapshot import changes as changes_module

    batch: list[Any] = [(1, 1, ["not", "hashable"], "k", None)]
    with pytest.raises(TypeError, match="unhashable"):
        Changes(seq_before=0).add(batch)
    monkeypatch.setattr(changes_module, "_changes_add", None)
    with pytest.raises(TypeError, match="unhashable"):
        Changes(seq_before=0).add(batch)
