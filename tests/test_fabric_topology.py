"""The cluster's wiring: sizing rules, link-id layout, paths, names, and config checks."""

from __future__ import annotations

import pytest

from timetravel.fabric.params import fabric_params, fabric_settings, topology_from_settings
from timetravel.fabric.schedule import parse_link
from timetravel.fabric.topology import build_topology
from timetravel.sim import ConfigError


def topology_for(ranks: int, **settings: object):
    return topology_from_settings(ranks, fabric_settings(settings))


def test_default_cluster_is_dgx_hosts_under_non_blocking_64_port_leaves() -> None:
    # 64 ports, oversubscription 1: 32 face NICs (4 hosts of 8 GPUs), 32 go up, one to each spine.
    topology = topology_for(1024)
    assert (topology.gpus_per_host, topology.hosts, topology.hosts_per_leaf) == (8, 128, 4)
    assert (topology.ranks_per_leaf, topology.leaves, topology.spines) == (32, 32, 32)
    assert topology.link_count == 4 * 1024 + 2 * 32 * 32


def test_oversubscription_trades_uplinks_for_nic_ports() -> None:
    # 3:1 on 64 ports: 48 NIC ports (6 hosts of 8), 16 uplinks.
    topology = topology_for(96, oversubscription=3.0)
    assert (topology.hosts_per_leaf, topology.spines, topology.leaves) == (6, 16, 2)


def test_a_partial_last_host_and_leaf_still_get_links() -> None:
    topology = topology_for(13, gpus_per_host=4, leaf_radix=16)
    assert (topology.hosts, topology.hosts_per_leaf, topology.leaves) == (4, 2, 2)
    assert topology.path(12, 0, spine=1) == [
        2 * 13 + 12,
        topology.leaf_up_base + 1 * 8 + 1,
        topology.spine_down_base + 0 + 1,
        3 * 13,
    ]


def test_paths_cross_two_or_four_links_in_the_documented_blocks() -> None:
    topology = topology_for(16, gpus_per_host=2, leaf_radix=8)
    ranks, spines = 16, topology.spines
    assert topology.path(0, 1) == [0, ranks + 1]  # NVLink out of r0, into r1
    assert topology.path(0, 2) == [2 * ranks + 0, 3 * ranks + 2]  # NIC out, NIC in, one leaf
    assert topology.path(5, 14, spine=3) == [
        2 * ranks + 5,
        4 * ranks + 1 * spines + 3,
        4 * ranks + topology.leaves * spines + 3 * spines + 3,
        3 * ranks + 14,
    ]
    assert (
        topology.crosses_spine(5, 14)
        and not topology.crosses_spine(0, 2)
        and not topology.crosses_spine(0, 1)
    )
    with pytest.raises(ValueError, match="spine 4 out of range"):
        topology.path(0, 8, spine=4)


def test_every_link_has_a_name_that_parses_back_to_it() -> None:
    topology = topology_for(16, gpus_per_host=2, leaf_radix=8)
    names = [topology.describe_link(link) for link in range(topology.link_count)]
    assert names[0] == "nvlink_out[r0]" and names[16 * 3 + 2] == "nic_in[r2]"
    assert topology.describe_link(topology.leaf_up_base + 2 * 4 + 1) == "leaf_up[l2->s1]"
    assert topology.describe_link(topology.spine_down_base + 2 * 4 + 1) == "spine_down[s1->l2]"
    assert [parse_link(name, topology) for name in names] == list(range(topology.link_count))
    assert len(set(names)) == topology.link_count
    assert parse_link("nic_in[r16]", topology) is None and parse_link("leaf_up[l9->s0]", topology) is None


def test_link_latencies_split_each_hop_and_sum_to_the_nccl_figures() -> None:
    topology = topology_for(16, gpus_per_host=2, leaf_radix=8)
    latency = topology.latency_table()
    assert sum(latency[link] for link in topology.path(0, 1)) == 3_400
    assert sum(latency[link] for link in topology.path(0, 2)) == 9_600
    assert sum(latency[link] for link in topology.path(0, 8, 0)) == 9_600 + 2 * 450
    assert [topology.link_latency_ns(link) for link in range(topology.link_count)] == latency
    bandwidth = topology.bandwidth_table()
    assert bandwidth[0] == 450 * 10**9 and bandwidth[2 * 16] == 50 * 10**9
    assert [topology.link_bytes_per_s(link) for link in range(topology.link_count)] == bandwidth


def test_impossible_clusters_are_config_errors_naming_the_problem() -> None:
    with pytest.raises(ConfigError, match="fewer than gpus_per_host=8: raise leaf_radix"):
        topology_for(16, leaf_radix=8)
    latencies = dict.fromkeys(("nvlink_latency_ns", "network_latency_ns", "uplink_latency_ns"), 0)
    speeds = dict.fromkeys(("nvlink_bytes_per_s", "nic_bytes_per_s", "uplink_bytes_per_s"), 1)
    with pytest.raises(ValueError, match="1 to"):  # 0 ranks
        build_topology(0, gpus_per_host=1, leaf_radix=4, oversubscription=1.0, **latencies, **speeds)


def test_fabric_params_take_scenario_defaults_and_refuse_unknown_keys() -> None:
    params = {param.name: param for param in fabric_params(gpus_per_host=4, faults_window=5_000)}
    assert params["gpus_per_host"].default == 4 and params["faults_window"].default == 5_000
    assert params["nvlink_latency"].default == 3_400 and params["network_latency"].default == 9_600
    with pytest.raises(ValueError, match="not fabric config keys: bogus"):
        fabric_params(bogus=1)
    with pytest.raises(ConfigError, match="gpus_per_host"):
        fabric_params(gpus_per_host="eight")


def test_settings_fill_missing_keys_and_check_present_ones() -> None:
    settings = fabric_settings({"nic_gbit_per_s": 200})
    assert (
        settings["nic_gbit_per_s"] == 200
        and settings["faults"] == "none"
        and settings["race_detector"] is True
    )
    with pytest.raises(ConfigError, match="faults_max"):
        fabric_settings({"faults_max": 10**6})
