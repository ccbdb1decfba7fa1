"""How long a collective of the user's script takes: timed on the fabric, at the collective level.

The torch backend lays its ranks out as the fabric does (docs/fabric.md): torchrun's
``--nproc-per-node`` GPUs per host, NVLink inside a host through its NVSwitch, one NIC per GPU into
a leaf of a two-level leaf-spine Clos (``leaf_radix``, ``oversubscription``, ``uplink_gbit_per_s``).
``world.fabric`` holds the link tables of that cluster (fabric/install.py: :func:`link_tables`),
including every link's busy-until time, so the timing below is the fabric's collective-level model
(fabric/collective_timing.py) run on the members of the torch group — the same arithmetic dp_training's
``fabric_level=collective`` uses, one event per rank whatever the rank count:

* **ring collectives** — all_reduce and reduce (2(n-1) steps of b/n bytes: reduce-scatter then
  all-gather), all_gather (n-1 steps of the b bytes each rank contributes), reduce_scatter and
  all_to_all (n-1 steps of b/n): the ring's message recurrence over the members in group order,
  each edge timed on its path's links (latencies, the slowest link's serialization, the mean
  jitter), every member starting from its own entry time (a straggler holds up the ring where it
  stands), and ``ring_completions`` leaving the edges' links busy until the ring is done there;
* **pipelined collectives** — broadcast, scatter and gather: (n-1) of the ring's longest edge
  latencies plus the b bytes through its slowest edge, from the last entry or the moment the ring's
  links are free, whichever is later; the links are then busy until it completes;
* **barrier**: 2⌈log2 n⌉ of the longest edge latencies (its messages are too small to hold a link);
* **send/recv**: one message over the path, queued FIFO on its links (``reserve_path``).

**Contention**: collectives are timed in the order the World resolves them (their last member's
entry), and each queues behind whatever earlier collective or message still holds its links — two
concurrent collectives over one host's NVLinks run one after the other, as their bandwidth shared
would finish them on average; groups on disjoint hosts do not touch each other. A collective
completes at one time for every member (the latest member's ring completion): torch hands a Work's
result to all members together in the flight recorder's view, and so does this backend.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from timetravel.fabric import collective_timing
from timetravel.fabric.install import link_tables
from timetravel.fabric.params import FABRIC_PARAMS, topology_from_settings

RING_OPS = ("all_reduce", "reduce", "all_gather", "reduce_scatter", "all_to_all")
PIPELINED_OPS = ("broadcast", "scatter", "gather")
TIMED_OPS = (*RING_OPS, *PIPELINED_OPS, "barrier")
FABRIC_KEYS = (
    "leaf_radix",
    "oversubscription",
    "nvlink_latency",
    "network_latency",
    "uplink_latency",
    "nvlink_gbyte_per_s",
    "nic_gbit_per_s",
    "uplink_gbit_per_s",
    "network_jitter",
)
"""The fabric's config keys a torch run takes (``gpus_per_host`` is ``nproc``; faults are torch's own)."""
JITTER_HELP = "per-message jitter bound; a collective's ring edges pay its mean (jitter/2), nothing is drawn"
FABRIC_TORCH_PARAMS = tuple(
    dataclasses.replace(param, help=JITTER_HELP) if param.name == "network_jitter" else param
    for param in FABRIC_PARAMS
    if param.name in FABRIC_KEYS
)
"""The fabric's Params as a torch run reads them (jitter's help says what the collective level does with it)."""


def fabric_state(config: Mapping[str, Any]) -> dict[str, Any]:
    """The link tables of the run's cluster: ``nnodes`` hosts of ``nproc`` GPUs (a ConfigError when
    the settings cannot be built)."""
    settings = {name: config[name] for name in FABRIC_KEYS}
    settings["gpus_per_host"] = config["nproc"]
    topology = topology_from_settings(config["nproc"] * config["nnodes"], settings)
    return {"hosts": topology.hosts, "leaves": topology.leaves, **link_tables(topology, settings)}


def collective_done_ns(
    fabric: dict[str, Any], op: str, members: list[int], entries_ns: list[int], rank_bytes: int
) -> int:
    """When collective ``op`` over ``members`` (global ranks, group order), entered at ``entries_ns``
    with ``rank_bytes`` from each, completes; the links it used stay busy until then (see above)."""
    count = len(members)
    assert count == len(entries_ns) and count >= 1, (members, entries_ns)
    assert all(time >= 0 for time in entries_ns), entries_ns
    if count == 1:
        return max(entries_ns)
    if op in RING_OPS:
        return _ring_done_ns(fabric, op, members, entries_ns, rank_bytes)
    edges = collective_timing.ring_edges(fabric, members)
    latency = fabric["link_latency_ns"]
    latency_max = max(sum(latency[link] for link in links) for links in edges)
    if op == "barrier":
        return max(entries_ns) + 2 * (count - 1).bit_length() * latency_max
    if op not in PIPELINED_OPS:
        raise ValueError(f"no timing model for {op}")
    busy = fabric["link_busy_until_ns"]
    start_ns = max([*entries_ns, *(busy[link] for links in edges for link in links)])
    through_ns = max(collective_timing.edge_delay_ns(fabric, links, rank_bytes) for links in edges)
    done_ns = start_ns + (count - 1) * latency_max + through_ns
    for links in edges:
        collective_timing.occupy(fabric, links, done_ns)
    return done_ns


def _ring_done_ns(
    fabric: dict[str, Any], op: str, members: list[int], entries_ns: list[int], rank_bytes: int
) -> int:
    count = len(members)
    if op in ("all_reduce", "reduce"):
        steps, chunk_bytes = 2 * (count - 1), -(-rank_bytes // count)
    elif op == "all_gather":
        steps, chunk_bytes = count - 1, rank_bytes
    else:
        steps, chunk_bytes = count - 1, -(-rank_bytes // count)
    entries = np.array(entries_ns, dtype=np.int64)
    done = collective_timing.ring_completions(fabric, entries, chunk_bytes, members=members, steps=steps)
    return int(done.max())


def point_to_point_done_ns(
    fabric: dict[str, Any], source: int, destination: int, start_ns: int, nbytes: int
) -> int:
    """When ``nbytes`` sent from ``source`` at ``start_ns`` (both sides there) reach ``destination``."""
    assert start_ns >= 0 and nbytes >= 0, (start_ns, nbytes)
    return collective_timing.reserve_path(fabric, source, destination, start_ns, nbytes)
