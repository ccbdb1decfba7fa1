"""Print the tables of docs/fabric.md, "Collectives against their models".

Run from the repository root: ``PYTHONPATH=. python docs/examples/collective_fidelity.py``
(a few minutes: the 1024-rank runs dominate). Each row runs one dp_training step with jitter off
and reads when each rank entered and completed its all-reduce from the rank states.
"""

from __future__ import annotations

import itertools
from typing import Any

from timetravel.fabric.params import fabric_settings, topology_from_settings
from timetravel.scenarios import get_scenario
from timetravel.scenarios.dp_training import tree
from timetravel.scenarios.dp_training.model import layout_for
from timetravel.sim import Simulation

SCENARIO = get_scenario("dp_training")


def measure(ranks: int, **settings: Any) -> tuple[int, int, dict[str, Any]]:
    """All-reduce time of step 1 on a uniform fabric (overridable), bucket bytes, config."""
    base = {
        "ranks": ranks,
        "steps": 1,
        "network_jitter": 0,
        "compute_jitter": 0,
        "gpus_per_host": 1,
        "leaf_radix": max(4, 2 * ranks),
        "params": 65536,
        "nic_gbit_per_s": 8,
        **settings,
    }
    config = SCENARIO.resolve_config(base)
    world = SCENARIO.build(config, 0)
    result = Simulation(SCENARIO, world).run()
    assert result.outcome == "pass", result.failure
    states = [world.nodes[f"r{index}"] for index in range(ranks)]
    start = min(state["coll_entered_ns"] for state in states)
    return (
        max(state["coll_done_ns"] for state in states) - start,
        (layout_for(config["params"]).params + 1) * 4,
        config,
    )


def ring_table() -> None:
    print("| N | S (bytes) | measured | 2(N-1)·α + 2(N-1)/N·S/B | measured / model |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for ranks in (8, 64, 256, 1024):
        measured, size, config = measure(ranks)
        model = 2 * (ranks - 1) * config["network_latency"] + 2 * (ranks - 1) / ranks * size / (
            config["nic_gbit_per_s"] / 8
        )
        print(
            f"| {ranks} | {size:,} | {measured / 1e3:,.1f} µs | {model / 1e3:,.1f} µs | {measured / model:.4f} |"
        )


def tree_table() -> None:
    print("| N | depth d | chunks K | measured | 2d(α + 2c/B) + 2(K-1)·2c/B | measured / model |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for ranks, chunk_bytes in (
        (7, 1 << 20),
        (63, 1 << 20),
        (255, 1 << 20),
        (1023, 1 << 20),
        (100, 1 << 20),
        (63, 65536),
        (255, 65536),
    ):
        measured, size, config = measure(ranks, allreduce="tree", tree_chunk_bytes=chunk_bytes)
        bytes_per_ns = config["nic_gbit_per_s"] / 8
        bounds = tree.chunk_bounds(size // 4, 4, chunk_bytes)
        chunks = len(bounds) - 1
        largest = max(high - low for low, high in itertools.pairwise(bounds)) * 4
        depth = tree.depth(ranks)
        model = (
            2 * depth * (config["network_latency"] + 2 * largest / bytes_per_ns)
            + 2 * (chunks - 1) * 2 * largest / bytes_per_ns
        )
        print(
            f"| {ranks} | {depth} | {chunks} | {measured / 1e3:,.1f} µs | {model / 1e3:,.1f} µs | {measured / model:.4f} |"
        )


def edge(config: dict[str, Any], topology: Any, source: int, destination: int) -> tuple[float, float]:
    """Latency (ns) and bandwidth (bytes/ns) of the path between two ranks on 8-GPU hosts."""
    if source // 8 == destination // 8:
        return config["nvlink_latency"], config["nvlink_gbyte_per_s"]
    uplinks = 2 * config["uplink_latency"] if topology.crosses_spine(source, destination) else 0
    return config["network_latency"] + uplinks, config["nic_gbit_per_s"] / 8


def default_cluster_ring_table() -> None:
    print("| N | measured | slowest-edge model | ratio | 2·Σ edges − 2·fastest | ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: |")
    for ranks in (16, 64, 256, 1024):
        measured, size, config = measure(
            ranks, gpus_per_host=8, leaf_radix=64, nic_gbit_per_s=400, params=2048
        )
        topology = topology_from_settings(ranks, fabric_settings(config))

        edges = [edge(config, topology, rank, (rank + 1) % ranks) for rank in range(ranks)]
        times = [latency + size / ranks / bandwidth for latency, bandwidth in edges]
        sum_model = 2 * sum(times) - 2 * min(times)
        latency, bandwidth = max(edges)
        slow_model = 2 * (ranks - 1) * latency + 2 * (ranks - 1) / ranks * size / bandwidth
        print(
            f"| {ranks} | {measured / 1e3:,.1f} µs | {slow_model / 1e3:,.1f} µs | {measured / slow_model:.3f} "
            f"| {sum_model / 1e3:,.1f} µs | {measured / sum_model:.3f} |"
        )


if __name__ == "__main__":
    ring_table()
    print()
    tree_table()
    print()
    default_cluster_ring_table()
