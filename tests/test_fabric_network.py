"""The network model: exact integer arrival times, FIFO queueing on links, ECMP and jitter choices.

Figures used below (probe topology: 2 GPUs per host, 4 ranks per leaf, 4 spines; defaults):
NVLink hop 3400 ns at 450 GB/s; network hop 9600 ns (4800 per NIC link) at 50 GB/s (400 Gb/s);
450 ns and 50 GB/s per leaf<->spine link. 1 MiB = 1048576 B takes ceil(1048576e9 / 450e9) = 2331 ns
on NVLink and ceil(1048576e9 / 50e9) = 20972 ns on a 400 Gb/s link.
"""

from __future__ import annotations

from fabric_probe import MIB, arrivals, probe_scenario, probe_world, run

from timetravel.fabric.network import reserve
from timetravel.fabric.topology import serialization_ns

NVLINK_MIB_NS = 2_331
NIC_MIB_NS = 20_972


def one_send(source: str, destination: str, nbytes: int, seed: int = 1, **settings: object) -> int:
    scenario = probe_scenario()
    world = probe_world(scenario, seed, **settings)
    world.schedule(0, source, "go", [[destination, "msg", "x", nbytes]])
    assert run(scenario, world).outcome == "pass"
    [[t_ns, _, _]] = arrivals(world, destination)
    return t_ns


def test_serialization_rounds_up_to_whole_nanoseconds() -> None:
    assert serialization_ns(MIB, 450 * 10**9) == NVLINK_MIB_NS
    assert serialization_ns(MIB, 50 * 10**9) == NIC_MIB_NS
    assert serialization_ns(1, 50 * 10**9) == 1
    assert serialization_ns(0, 50 * 10**9) == 0


def test_one_nvlink_hop_is_its_latency_plus_size_over_bandwidth() -> None:
    assert one_send("r0", "r1", MIB) == 3_400 + NVLINK_MIB_NS == 5_731


def test_one_network_hop_inside_a_leaf() -> None:
    assert one_send("r0", "r2", MIB) == 9_600 + NIC_MIB_NS == 30_572


def test_multi_hop_through_a_spine_adds_both_uplinks() -> None:
    assert one_send("r0", "r4", MIB) == 4_800 + 450 + 450 + 4_800 + NIC_MIB_NS == 31_472
    assert one_send("r0", "r4", 0) == 10_500
    assert one_send("r0", "r4", 1) == 10_501


def test_cut_through_pays_the_slowest_link_once_not_per_hop() -> None:
    # 100 Gb/s uplinks: 1 MiB takes ceil(1048576e9 / 12.5e9) = 83887 ns there, and only there.
    assert one_send("r0", "r4", MIB, uplink_gbit_per_s=100) == 10_500 + 83_887


def test_nodes_off_the_fabric_use_the_control_latency_and_a_self_send_is_immediate() -> None:
    assert one_send("ctl", "r3", MIB) == 10_000
    assert one_send("r3", "ctl", MIB, control_latency=2_500) == 2_500
    assert one_send("r3", "r3", MIB) == 0


def test_two_flows_on_one_link_serialize_fifo() -> None:
    scenario = probe_scenario()
    world = probe_world(scenario)
    world.schedule(0, "r0", "go", [["r2", "msg", "first", MIB], ["r2", "msg", "second", MIB]])
    run(scenario, world)
    # The second waits for the first to leave r0's NIC: exactly one serialization later.
    assert arrivals(world, "r2") == [[30_572, "msg", "first"], [30_572 + NIC_MIB_NS, "msg", "second"]]


def test_incast_serializes_on_the_receivers_nic_and_disjoint_flows_do_not_interact() -> None:
    scenario = probe_scenario()
    world = probe_world(scenario)
    world.schedule(0, "r0", "go", [["r2", "msg", "from r0", MIB]])
    world.schedule(0, "r1", "go", [["r2", "msg", "from r1", MIB], ["r3", "msg", "to r3", MIB]])
    run(scenario, world)
    assert arrivals(world, "r2") == [[30_572, "msg", "from r0"], [51_544, "msg", "from r1"]]
    # r1 -> r3 queued behind r1 -> r2 on r1's own NIC, but nothing else.
    assert arrivals(world, "r3") == [[51_544, "msg", "to r3"]]
    world = probe_world(scenario)
    world.schedule(0, "r0", "go", [["r2", "msg", "a", MIB]])
    world.schedule(0, "r1", "go", [["r3", "msg", "b", MIB]])
    run(scenario, world)
    assert arrivals(world, "r2")[0][0] == arrivals(world, "r3")[0][0] == 30_572


def test_link_reservations_live_in_the_world() -> None:
    scenario = probe_scenario()
    world = probe_world(scenario)
    world.schedule(0, "r0", "go", [["r2", "msg", "x", MIB]])
    run(scenario, world)
    busy = world.fabric["link_busy_until_ns"]
    assert busy[2 * 16 + 0] == NIC_MIB_NS  # nic_out[r0]
    assert busy[3 * 16 + 2] == 4_800 + NIC_MIB_NS  # nic_in[r2]
    assert sum(1 for value in busy if value) == 2
    # reserve() is the same arithmetic: a second message on the same links waits.
    assert reserve(world.fabric, [2 * 16, 3 * 16 + 2], 0, MIB) == 51_544


def ecmp_race(seed: int) -> tuple[list[str], list[int]]:
    """r0 sends 1 MiB to r8 and r1 sends 1 KiB to r9, both across leaves, at t=0.

    On different spines the small one arrives first (10500 + 21 ns); on the same spine it queues
    behind the big one on leaf 0's uplink and arrives at 31493 ns, after it (31472 ns).
    """
    scenario = probe_scenario()
    world = probe_world(scenario, seed)
    world.schedule(0, "r0", "go", [["r8", "msg", "big", MIB]])
    world.schedule(0, "r1", "go", [["r9", "msg", "small", 1024]])
    choices: list[list[object]] = []
    run(scenario, world, choice_log=choices)
    spines = [value for node, site, _, value in choices if site == "fabric.ecmp"]
    arrived = sorted(arrivals(world, "r8") + arrivals(world, "r9"))
    return [entry[2] for entry in arrived], spines


def test_ecmp_arrival_order_varies_with_the_seed_and_never_within_one() -> None:
    orders = {}
    for seed in range(24):
        order, spines = ecmp_race(seed)
        assert ecmp_race(seed) == (order, spines)
        assert len(spines) == 2 and all(0 <= spine < 4 for spine in spines)
        assert order == (["big", "small"] if spines[0] == spines[1] else ["small", "big"])
        orders[seed] = order
    assert {tuple(order) for order in orders.values()} == {("big", "small"), ("small", "big")}


def test_jitter_is_a_choice_added_to_the_send_time() -> None:
    seen = set()
    for seed in range(8):
        scenario = probe_scenario()
        world = probe_world(scenario, seed, network_jitter=1_000)
        world.schedule(0, "r0", "go", [["r2", "msg", "x", 0]])
        choices: list[list[object]] = []
        run(scenario, world, choice_log=choices)
        [jitter] = [value for node, site, _, value in choices if site == "fabric.jitter" and node == "r0"]
        assert 0 <= jitter <= 1_000
        assert arrivals(world, "r2")[0][0] == 9_600 + jitter
        seen.add(jitter)
    assert len(seen) > 1


def test_a_pinned_choice_replays_a_path() -> None:
    scenario = probe_scenario()
    world = probe_world(scenario)
    world.schedule(0, "r0", "go", [["r8", "msg", "x", MIB]])
    run(scenario, world, overrides={("r0", "fabric.ecmp", 0): 3})
    topology_spine_down = world.fabric["route"][5] + 2 * 4 + 3  # spine_down[s3->l2]
    assert world.fabric["link_busy_until_ns"][topology_spine_down] > 0
