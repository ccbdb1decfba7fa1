"""How long a collective takes: NCCL's ring model on the fabric's hosts, links and latencies.

Ranks are laid out as hosts × GPUs (``gpus_per_host`` is torchrun's ``--nproc-per-node``). A ring over
a group's members has one edge per consecutive pair; an edge inside a host is NVLink
(``nvlink_latency``, ``nvlink_gbyte_per_s``), across hosts the network (``network_latency`` plus two
leaf–spine hops, ``nic_gbit_per_s``). A ring step costs its slowest edge: latency plus the chunk's
serialization. Then, with n members and b bytes per rank (NCCL's own accounting, ``docs/torch.md``):

* all_reduce, reduce: 2(n−1) steps of b/n bytes (reduce-scatter then all-gather);
* all_gather, reduce_scatter, all_to_all: n−1 steps of b/n bytes of the gathered or scattered size;
* broadcast, scatter, gather: n−1 latencies plus b bytes through the slowest edge (pipelined);
* barrier: 2·⌈log2 n⌉ latencies; send/recv: one edge.

This is the analytical cost, not a message-level simulation: concurrent collectives do not contend
for links here (docs/torch.md says so), which keeps a collective at one event per rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

NS_PER_S = 1_000_000_000
BITS_PER_BYTE = 8


def _edge(source: int, destination: int, settings: Mapping[str, Any]) -> tuple[int, int]:
    """(latency ns, bytes per second) of the link between two ranks."""
    per_host = settings["gpus_per_host"]
    if source // per_host == destination // per_host:
        return settings["nvlink_latency"], settings["nvlink_gbyte_per_s"] * NS_PER_S
    latency = settings["network_latency"] + 2 * settings["uplink_latency"]
    return latency, settings["nic_gbit_per_s"] * NS_PER_S // BITS_PER_BYTE


def _step_ns(members: list[int], chunk_bytes: int, settings: Mapping[str, Any]) -> int:
    slowest = 0
    count = len(members)
    for position, source in enumerate(members):
        latency, bytes_per_s = _edge(source, members[(position + 1) % count], settings)
        slowest = max(slowest, latency + -(-chunk_bytes * NS_PER_S // bytes_per_s))
    return slowest


def collective_ns(op: str, members: list[int], rank_bytes: int, settings: Mapping[str, Any]) -> int:
    """Duration of one collective from the moment its last member entered (see the module docstring)."""
    count = len(members)
    if count == 1:
        return 0
    if op in ("all_reduce", "reduce"):
        return 2 * (count - 1) * _step_ns(members, -(-rank_bytes // count), settings)
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (count - 1) * _step_ns(
            members, -(-rank_bytes // count) if op != "all_gather" else rank_bytes, settings
        )
    if op in ("broadcast", "scatter", "gather"):
        latency_max = max(_edge(members[i], members[(i + 1) % count], settings)[0] for i in range(count))
        return (count - 1) * latency_max + _step_ns(members, rank_bytes, settings)
    if op == "barrier":
        latency_max = max(_edge(members[i], members[(i + 1) % count], settings)[0] for i in range(count))
        return 2 * (count - 1).bit_length() * latency_max
    raise ValueError(f"no cost model for {op}")


def point_to_point_ns(source: int, destination: int, nbytes: int, settings: Mapping[str, Any]) -> int:
    latency, bytes_per_s = _edge(source, destination, settings)
    return latency + -(-nbytes * NS_PER_S // bytes_per_s)
