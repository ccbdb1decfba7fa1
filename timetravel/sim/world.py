"""The World: the whole simulation state as one value made of plain data and numpy arrays.

Nothing in a World is code or a live object. Node states are dicts; pending events are
:class:`Event` tuples; the fabric, the fault schedule, failures and metrics are lists and dicts.
That is what makes snapshots, seeking, branching and diffs possible (DESIGN.md, principle 2).

``state_hash()`` is a Merkle root over the world's parts (the clock, each node, the pending
events, the fabric, ...). Each part is hashed on its own so that the snapshot store can reuse the
digest of a part that did not change. ``effects_hash()`` leaves out what a branch changes on
purpose (the fault schedule, the config, the seed and branch key), so two branches that behave
alike compare equal even though they were asked for differently.
"""

from __future__ import annotations

import heapq
from typing import Any

import xxhash

from timetravel.sim.choices import CHOICE_COUNTERS_KEY
from timetravel.sim.encoding import digest, merkle_root, pack
from timetravel.sim.event import Event
from timetravel.sim.timefmt import DISPLAY_UNIT_DEFAULT

LOG_ENTRIES_MAX = 10_000
"""Bound on the world's log; past it the oldest half is dropped (and the drop is counted)."""
NODES_MAX = 1_000_000

PART_NAMES_EXCLUDED_FROM_EFFECTS = ("config", "faults", "keys")
METRIC_CHUNK_ENTRIES = 1024
"""Metric series are hashed in chunks of this many entries (see :func:`metrics_digest`)."""


def series_digest_from_chunks(length: int, chunk_digests: list[bytes]) -> bytes:
    """The digest of a metric series of ``length`` entries from the digests of its chunks."""
    return xxhash.xxh3_128_digest(pack(length) + b"".join(chunk_digests))


def series_digest(series: list[Any]) -> bytes:
    """Digest of one metric series: its length and the digests of its fixed-size chunks."""
    chunks = [
        digest(series[start : start + METRIC_CHUNK_ENTRIES])
        for start in range(0, len(series), METRIC_CHUNK_ENTRIES)
    ]
    return series_digest_from_chunks(len(series), chunks)


QUEUE_SUM_MODULUS = 1 << 128


def event_digest_value(event: Event) -> int:
    """One pending event's digest (arrays by their page digests) as a 128-bit integer."""
    return int.from_bytes(digest(event), "little")


def queue_digest_from(count: int, total: int) -> bytes:
    """The queue's digest from its event count and the sum of its events' digest values."""
    return xxhash.xxh3_128_digest(pack([count, (total % QUEUE_SUM_MODULUS).to_bytes(16, "little")]))


def queue_digest(queue: list[Event]) -> bytes:
    """Digest of the pending events as a set: the sum of their digests modulo 2**128.

    Every event has a unique ``seq``, so the queue is a set and a sum of per-event digests
    identifies it whatever the heap's layout. Unlike a hash of the sorted queue, a sum can be
    updated: the snapshot store adds the digests of events scheduled since the last snapshot and
    subtracts those of the events that ran, so a snapshot costs what changed, not the queue size.
    """
    return queue_digest_from(len(queue), sum(map(event_digest_value, queue)))


def metrics_digest(metrics: dict[str, list[Any]]) -> bytes:
    """Merkle root over the metric series, each hashed by chunks.

    Metrics only grow (``ctx.metric`` appends), so a full chunk never changes again: the snapshot
    store keeps each full chunk's digest and hashes only the open tail, instead of re-encoding
    every metric ever recorded at every snapshot.
    """
    return merkle_root([(name, series_digest(series)) for name, series in metrics.items()])


DATA_SLOTS = (
    "branch_key",
    "chain_batch",
    "chain_digest",
    "chain_events",
    "choices",
    "config",
    "display_unit",
    "down",
    "events_processed",
    "fabric",
    "failures",
    "faults",
    "log",
    "log_dropped",
    "metrics",
    "nodes",
    "queue",
    "roles",
    "scenario",
    "seed",
    "seq",
    "t_ns",
)
"""Every attribute of a World: all of it plain data."""


class World:
    """The simulation state. Every attribute is plain data; see the module docstring.

    A World can be referred to weakly (``__weakref__``, not data): the owner of a run's external
    processes (``Scenario.processes``) keeps which world its processes belong to without keeping the
    world alive."""

    __slots__ = (*DATA_SLOTS, "__weakref__")

    def __init__(self, scenario: str, config: dict[str, Any], seed: int, *, branch_key: int = 0) -> None:
        self.scenario = scenario
        self.config = config
        self.seed = seed
        self.branch_key = branch_key
        self.display_unit = DISPLAY_UNIT_DEFAULT
        self.t_ns = 0
        self.seq = 0
        self.events_processed = 0
        self.queue: list[Event] = []
        self.nodes: dict[str, dict[str, Any]] = {}
        self.roles: dict[str, str] = {}
        self.down: dict[str, int] = {}
        self.choices: dict[str, int] = {}
        self.fabric: dict[str, Any] = {}
        self.faults: list[dict[str, Any]] = []
        self.failures: list[dict[str, Any]] = []
        self.metrics: dict[str, list[list[Any]]] = {}
        self.log: list[list[Any]] = []
        self.log_dropped = 0
        self.chain_digest = b""
        self.chain_events = 0
        self.chain_batch: list[Event] = []

    # -- building -------------------------------------------------------------------------------

    def add_node(self, name: str, role: str, state: dict[str, Any] | None = None) -> dict[str, Any]:
        """Add a node with its role (which selects its handlers) and its initial state."""
        if name in self.nodes:
            raise ValueError(f"node {name!r} exists already")
        if not name or "/" in name:
            raise ValueError(f"node name {name!r} must be non-empty and contain no '/'")
        if len(self.nodes) >= NODES_MAX:
            raise ValueError(f"a world holds at most {NODES_MAX} nodes")
        node_state = {} if state is None else state
        node_state.setdefault(CHOICE_COUNTERS_KEY, {})
        self.nodes[name] = node_state
        self.roles[name] = role
        return node_state

    def schedule(self, t_ns: int, dst: str, kind: str, payload: Any = None) -> None:
        """Schedule an event at absolute time ``t_ns`` (not earlier than now)."""
        if type(t_ns) is not int:
            raise TypeError(f"event time must be an int of nanoseconds, got {type(t_ns).__name__}")
        if t_ns < self.t_ns:
            raise ValueError(f"cannot schedule at {t_ns} ns, before now ({self.t_ns} ns)")
        heapq.heappush(self.queue, Event(t_ns, self.seq, dst, kind, payload))
        self.seq += 1

    # -- hashing --------------------------------------------------------------------------------

    def part_digests(self) -> list[tuple[str, bytes]]:
        """The (name, digest) of every part, in a fixed order: the leaves of the Merkle root."""
        nodes_root = merkle_root([(name, digest(state)) for name, state in self.nodes.items()])
        return [
            ("clock", digest([self.t_ns, self.seq, self.events_processed])),
            ("keys", digest([self.scenario, self.seed, self.branch_key, self.choices])),
            ("config", digest(self.config)),
            ("nodes", nodes_root),
            ("roles", digest(self.roles)),
            ("down", digest(self.down)),
            ("queue", queue_digest(self.queue)),
            ("fabric", digest(self.fabric)),
            ("faults", digest(self.faults)),
            ("failures", digest(self.failures)),
            ("metrics", metrics_digest(self.metrics)),
            ("log", digest([self.log, self.log_dropped])),
        ]

    def state_hash(self) -> str:
        """Hex Merkle root over every part of the world."""
        return merkle_root(self.part_digests()).hex()

    def effects_hash(self) -> str:
        """Hex Merkle root over the parts a branch does not change on purpose."""
        parts = [part for part in self.part_digests() if part[0] not in PART_NAMES_EXCLUDED_FROM_EFFECTS]
        return merkle_root(parts).hex()

    # -- reading --------------------------------------------------------------------------------

    @property
    def failure(self) -> dict[str, Any] | None:
        """The first failure, which ended the run, or None."""
        return self.failures[0] if self.failures else None

    def to_data(self) -> dict[str, Any]:
        """The whole world as one plain-data dict (for tests, diffs and small recordings)."""
        return {name: getattr(self, name) for name in DATA_SLOTS}

    @classmethod
    def from_data(cls, data: dict[str, Any]) -> World:
        """Rebuild a World from :meth:`to_data` output (events come back as Event tuples)."""
        world = cls.__new__(cls)
        for name in DATA_SLOTS:
            setattr(world, name, data[name])
        world.queue = [Event(*event) for event in data["queue"]]
        heapq.heapify(world.queue)
        world.chain_batch = [Event(*event) for event in data["chain_batch"]]
        return world
