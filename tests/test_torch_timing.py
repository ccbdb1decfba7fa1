"""Collectives of the user's script timed on the fabric (torch/timing.py): topology, links, contention.

The unit tests assert exact virtual times from the link tables of docs/fabric.md; the end-to-end ones
run real torch.distributed ranks and read the flight recorder (what the World says each collective
took), so they check what a user sees: a ring across hosts is slower than one inside a host, two
collectives in flight on the same links queue behind each other, groups on disjoint hosts do not.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch_functions

from timetravel.fabric import collective_timing
from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.sim.scenario import ConfigError
from timetravel.torch.api import function_target
from timetravel.torch.world.specs import launch_naming_function
from timetravel.torch.world.timing import collective_done_ns, fabric_state, point_to_point_done_ns

NS_PER_S = 1_000_000_000
NVLINK_LATENCY_NS = 3_400
NETWORK_LATENCY_NS = 9_600
JITTER_MEAN_NS = 250
NVLINK_BYTES_PER_S = 450 * NS_PER_S
NIC_BYTES_PER_S = 400 * NS_PER_S // 8


def _config(**settings: Any) -> dict[str, Any]:
    return get_scenario("torch").resolve_config({"function": "m:f", **settings})


def _serialize_ns(nbytes: int, bytes_per_s: int) -> int:
    return -(-nbytes * NS_PER_S // bytes_per_s)


def test_an_all_reduce_inside_one_host_is_the_ring_on_nvlink() -> None:
    fabric = fabric_state(_config(nproc=4))
    rank_bytes = 4 << 20
    edge_ns = NVLINK_LATENCY_NS + _serialize_ns(rank_bytes // 4, NVLINK_BYTES_PER_S) + JITTER_MEAN_NS
    assert collective_done_ns(fabric, "all_reduce", [0, 1, 2, 3], [1_000] * 4, rank_bytes) == (
        1_000 + 2 * 3 * edge_ns
    )


def test_a_ring_across_hosts_pays_the_network() -> None:
    one_host = fabric_state(_config(nproc=4))
    two_hosts = fabric_state(_config(nproc=2, nnodes=2))
    assert (two_hosts["hosts"], one_host["hosts"]) == (2, 1)
    rank_bytes = 4 << 20
    inside = collective_done_ns(one_host, "all_reduce", [0, 1, 2, 3], [0] * 4, rank_bytes)
    across = collective_done_ns(two_hosts, "all_reduce", [0, 1, 2, 3], [0] * 4, rank_bytes)
    # every one of the 2(n-1) chunks rank 2 receives crosses the network edge 1 -> 2 (its NIC), one
    # after the other; the fast NVLink edges pipeline behind them, so the ring is not 2(n-1) slowest steps
    chunk_on_nic_ns = _serialize_ns(rank_bytes // 4, NIC_BYTES_PER_S)
    slowest_step_ns = NETWORK_LATENCY_NS + chunk_on_nic_ns + JITTER_MEAN_NS
    assert 2 * 3 * chunk_on_nic_ns + NETWORK_LATENCY_NS <= across < 2 * 3 * slowest_step_ns
    assert across > 3 * inside


def test_all_gather_is_n_minus_one_steps_of_a_whole_contribution() -> None:
    fabric = fabric_state(_config(nproc=4))
    rank_bytes = 1 << 20
    edge_ns = NVLINK_LATENCY_NS + _serialize_ns(rank_bytes, NVLINK_BYTES_PER_S) + JITTER_MEAN_NS
    assert collective_done_ns(fabric, "all_gather", [0, 1, 2, 3], [0] * 4, rank_bytes) == 3 * edge_ns


def test_a_straggler_holds_the_ring_up_where_it_stands() -> None:
    fabric = fabric_state(_config(nproc=4))
    on_time = collective_done_ns(fabric_state(_config(nproc=4)), "all_reduce", [0, 1, 2, 3], [0] * 4, 1 << 20)
    late = collective_done_ns(fabric, "all_reduce", [0, 1, 2, 3], [0, 0, 50_000, 0], 1 << 20)
    assert late >= 50_000 + on_time - 3 * (on_time // 6)  # the others' first steps ran before it came
    assert late > on_time + 40_000


def test_collectives_on_the_same_links_queue_and_disjoint_ones_do_not() -> None:
    fabric = fabric_state(_config(nproc=2, nnodes=2))
    alone = collective_done_ns(
        fabric_state(_config(nproc=2, nnodes=2)), "all_reduce", [0, 1], [0, 0], 1 << 22
    )
    first = collective_done_ns(fabric, "all_reduce", [0, 1], [0, 0], 1 << 22)
    second = collective_done_ns(fabric, "all_reduce", [0, 1], [0, 0], 1 << 22)
    other_host = collective_done_ns(fabric, "all_reduce", [2, 3], [0, 0], 1 << 22)
    assert first == alone == other_host
    assert second >= first + alone - NVLINK_LATENCY_NS  # queued behind the first on both NVLink edges


def test_broadcast_barrier_and_send_are_timed_on_the_links() -> None:
    fabric = fabric_state(_config(nproc=4))
    nbytes = 1 << 20
    through_ns = NVLINK_LATENCY_NS + _serialize_ns(nbytes, NVLINK_BYTES_PER_S) + JITTER_MEAN_NS
    assert collective_done_ns(fabric, "broadcast", [0, 1, 2, 3], [0] * 4, nbytes) == (
        3 * NVLINK_LATENCY_NS + through_ns
    )
    assert collective_done_ns(fabric, "barrier", [0, 1, 2, 3], [10] * 4, 0) == 10 + 2 * 2 * NVLINK_LATENCY_NS
    fresh = fabric_state(_config(nproc=4))
    arrival = point_to_point_done_ns(fresh, 0, 1, 100, nbytes)
    assert arrival == 100 + JITTER_MEAN_NS + NVLINK_LATENCY_NS + _serialize_ns(nbytes, NVLINK_BYTES_PER_S)
    assert point_to_point_done_ns(fresh, 0, 1, 100, nbytes) > arrival  # the second send queues


def test_a_group_of_one_completes_at_its_entry_and_bad_sizes_are_refused() -> None:
    fabric = fabric_state(_config(nproc=4))
    assert collective_done_ns(fabric, "all_reduce", [2], [123], 1 << 20) == 123
    with pytest.raises(ConfigError, match="fabric"):
        fabric_state(_config(nproc=2, leaf_radix=2))
    with pytest.raises(ValueError, match="no timing model for scan"):
        collective_done_ns(fabric, "scan", [0, 1], [0, 0], 8)


def test_the_ring_generalised_to_members_and_steps_keeps_dp_training_s_ring() -> None:
    """dp_training's collective level calls ring_completions without members or steps: the same bits."""
    fabric = fabric_state(_config(nproc=8))
    entries = np.array([0, 10, 0, 700, 5, 0, 0, 3], dtype=np.int64)
    table = list(fabric["link_busy_until_ns"])
    default = collective_timing.ring_completions(fabric, entries, 4096)
    fabric["link_busy_until_ns"] = table
    explicit = collective_timing.ring_completions(fabric, entries, 4096, members=list(range(8)), steps=14)
    assert default.tolist() == explicit.tolist()


def _flight(function: Any, **settings: Any) -> dict[str, list[dict[str, Any]]]:
    target = function_target(function)
    launch = launch_naming_function(target)
    scenario = get_scenario("torch")
    config = scenario.resolve_config(
        {"function": target, "rank_output": "quiet", "compute_jitter": 0, **settings}
    )
    report, world = run_report(scenario, config, 0, launch=launch)
    assert report["outcome"] == "pass", report["failure"]
    flight = world.nodes["c10d"]["flight"]
    return {
        rank: [record for record in records if "all_reduce" in record["what"]]
        for rank, records in flight.items()
    }


def _took_ns(record: dict[str, Any]) -> int:
    return int(record["t_done_ns"]) - int(record["t_enter_ns"])


def test_a_script_s_concurrent_all_reduces_share_the_links() -> None:
    alone = _flight(torch_functions.one_all_reduce, nproc=2, nnodes=2)
    concurrent = _flight(torch_functions.two_concurrent_all_reduces, nproc=2, nnodes=2)
    single_ns = _took_ns(alone["0"][0])
    first, second = concurrent["0"]
    assert single_ns > 100_000  # 4 MiB across the network: the transfer decides
    assert first["t_done_ns"] - max(first["t_enter_ns"], 0) >= single_ns - 1_000
    assert second["t_done_ns"] >= first["t_done_ns"] + single_ns - 2 * NETWORK_LATENCY_NS


def test_groups_on_disjoint_hosts_do_not_slow_each_other() -> None:
    flight = _flight(torch_functions.all_reduce_in_own_pair, nproc=2, nnodes=2)
    took = {rank: _took_ns(records[-1]) for rank, records in flight.items()}
    inside_ns = 2 * (NVLINK_LATENCY_NS + _serialize_ns(2 << 20, NVLINK_BYTES_PER_S) + JITTER_MEAN_NS)
    assert took["0"] == took["1"] == took["2"] == took["3"] == inside_ns
