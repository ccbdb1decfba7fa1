"""Turning decoded snapshot parts back into a World, and the Merkle root of a manifest.

Shared by the in-memory store and the recording reader, so that a snapshot restored from memory
and one read from a file go through the same code and the same checks.
"""

from __future__ import annotations

import heapq
from typing import Any

import xxhash

from timetravel.sim.encoding import DecodeError, merkle_root
from timetravel.sim.event import Event, event_from_data, events_from_lists
from timetravel.sim.world import World, series_digest_from_chunks

PART_ORDER = (
    "clock",
    "keys",
    "config",
    "nodes",
    "roles",
    "down",
    "queue",
    "fabric",
    "faults",
    "failures",
    "metrics",
    "log",
)
"""The leaves of ``World.part_digests()`` in its order (a test pins the two together)."""
STORED_PARTS = tuple(name for name in PART_ORDER if name not in ("nodes", "queue", "metrics"))
"""Parts stored as one blob each; nodes, the queue and metrics are stored in pieces."""


def root_from_digests(part_digests: dict[str, bytes]) -> str:
    """Hex Merkle root over the parts, as ``World.state_hash()`` computes it."""
    return merkle_root([(name, part_digests[name]) for name in PART_ORDER]).hex()


def nodes_root_from_segments(segments: list[bytes]) -> bytes:
    """Merkle root over nodes from their ``name\\0digest`` segments (``merkle_root``'s exact bytes)."""
    return xxhash.xxh3_128_digest(b"".join(segments))


def node_segment(name: str, node_digest: bytes) -> bytes:
    return name.encode() + b"\x00" + node_digest


def metrics_root(series: list[tuple[str, int, list[bytes]]]) -> bytes:
    """Digest of the metrics part from (name, length, chunk digests) of every series."""
    return merkle_root([(name, series_digest_from_chunks(length, chunks)) for name, length, chunks in series])


def _expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise DecodeError(f"{what} has the wrong type ({type(value).__name__})")
    return value


def assemble_world(
    parts: dict[str, Any],
    nodes: dict[str, Any],
    queue_events: list[Any],
    metrics: dict[str, list[Any]],
    chain: tuple[bytes, int, list[Any]],
    display_unit: str,
) -> World:
    """A World from decoded parts; every field is type-checked (the parts may come from a file)."""
    world = World.__new__(World)
    clock = _expect(parts["clock"], list, "clock")
    keys = _expect(parts["keys"], list, "keys")
    log = _expect(parts["log"], list, "log")
    if len(clock) != 3 or len(keys) != 4 or len(log) != 2:
        raise DecodeError("clock, keys or log part has the wrong length")
    world.t_ns, world.seq, world.events_processed = (_expect(value, int, "clock field") for value in clock)
    world.scenario = _expect(keys[0], str, "scenario name")
    world.seed = _expect(keys[1], int, "seed")
    world.branch_key = _expect(keys[2], int, "branch key")
    world.choices = _expect(keys[3], dict, "world choices")
    world.config = _expect(parts["config"], dict, "config")
    world.roles = _expect(parts["roles"], dict, "roles")
    world.down = _expect(parts["down"], dict, "down")
    world.fabric = _expect(parts["fabric"], dict, "fabric")
    world.faults = _expect(parts["faults"], list, "faults")
    world.failures = _expect(parts["failures"], list, "failures")
    world.log = _expect(log[0], list, "log entries")
    world.log_dropped = _expect(log[1], int, "log_dropped")
    # checked in one pass, named only on failure (10,000 nodes and 20,000 events at each restore)
    wrong = next((name for name, state in nodes.items() if not isinstance(state, dict)), None)
    if wrong is not None:
        _expect(nodes[wrong], dict, f"state of node {wrong}")
    world.nodes = nodes
    world.metrics = metrics
    world.queue = [data if type(data) is Event else stored_event(data) for data in queue_events]
    heapq.heapify(world.queue)
    chain_digest, chain_events, open_batch = chain
    world.chain_digest = _expect(chain_digest, bytes, "chain digest")
    world.chain_events = _expect(chain_events, int, "chain events")
    world.chain_batch = stored_events(open_batch)
    world.display_unit = display_unit
    return world


def stored_events(values: list[Any]) -> list[Event]:
    """``[stored_event(data) for data in values]``, the common form without a Python call each
    (sim/event.py ``events_from_lists``)."""
    return events_from_lists(values, stored_event)


def stored_event(data: Any) -> Event:
    """An Event from its stored form (a 5-item list), checked; an Event is returned as it is."""
    if isinstance(data, Event):
        return data
    if not isinstance(data, (list, tuple)):
        raise DecodeError("a stored event is not a list")
    try:
        return event_from_data(data)
    except ValueError as error:
        raise DecodeError(f"a stored event is not valid: {error}") from None
