"""Faults: each kind's effect, removing a record removes it, swarm schedules, and bad specs.

Probe topology (fabric_probe.py): r0,r1 on host 0 and r2,r3 on host 1 share leaf 0; r4..r7 are on
leaf 1; 4 spines. A 0-byte message r0 -> r2 takes exactly 9600 ns (one network hop).
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from fabric_probe import MIB, arrivals, probe_scenario, probe_world, run

from timetravel import fabric
from timetravel.cli import main as cli_main
from timetravel.sim import ConfigError, Context, Simulation, World

HOP_NS = 9_600


def with_faults(
    faults: Any,
    sends: list[tuple[int, str, list[list[Any]]]],
    hooks: fabric.Hooks | None = None,
    **settings: Any,
) -> tuple[World, Any]:
    scenario = probe_scenario(hooks=hooks)
    world = probe_world(scenario, faults=faults, **settings)
    for t_ns, source, messages in sends:
        world.schedule(t_ns, source, "go", messages)
    return world, run(scenario, world)


def times(world: World, node: str) -> list[int]:
    return [entry[0] for entry in arrivals(world, node)]


def partition(**params: Any) -> list[dict[str, Any]]:
    return [{"kind": "partition", "target": "r0", "t_start": 0, "t_end": 100_000, "params": params}]


BOTH_WAYS = [
    (10, "r0", [["r2", "msg", "out", 0]]),
    (10, "r2", [["r0", "msg", "in", 0]]),
    (10, "r1", [["r2", "msg", "bystander", 0]]),
]


def test_a_partition_cuts_both_ways_for_its_window_and_counts_what_it_cut() -> None:
    world, result = with_faults(partition(), [*BOTH_WAYS, (200_000, "r0", [["r2", "msg", "healed", 0]])])
    assert result.outcome == "pass"
    assert arrivals(world, "r2") == [[10 + HOP_NS, "msg", "bystander"], [200_000 + HOP_NS, "msg", "healed"]]
    assert arrivals(world, "r0") == []
    assert world.fabric["fault_hits"] == {"f1": 2}


def test_one_way_partitions_cut_only_their_direction() -> None:
    world, _ = with_faults(partition(direction="out"), BOTH_WAYS)
    assert [entry[2] for entry in arrivals(world, "r2")] == ["bystander"]
    assert [entry[2] for entry in arrivals(world, "r0")] == ["in"]
    world, _ = with_faults(partition(direction="in"), BOTH_WAYS)
    assert sorted(entry[2] for entry in arrivals(world, "r2")) == ["bystander", "out"]
    assert arrivals(world, "r0") == []


def test_a_holding_partition_delivers_when_it_heals() -> None:
    world, _ = with_faults(partition(mode="hold"), BOTH_WAYS)
    assert arrivals(world, "r0") == [[100_000 + HOP_NS, "msg", "in"]]
    assert [100_000 + HOP_NS, "msg", "out"] in arrivals(world, "r2")


def test_host_scope_and_peers_shape_the_cut() -> None:
    sends = [(10, "r1", [["r2", "msg", "r1->r2", 0], ["r0", "msg", "r1->r0", 0]])]
    world, _ = with_faults(partition(scope="host"), sends)
    assert arrivals(world, "r2") == [] and len(arrivals(world, "r0")) == 1  # r1 is cut with r0, not from it
    sends = [(10, "r0", [["r2", "msg", "to r2", 0], ["r3", "msg", "to r3", 0]])]
    world, _ = with_faults(partition(peers=["r2"]), sends)
    assert arrivals(world, "r2") == [] and len(arrivals(world, "r3")) == 1


def test_cut_spines_are_routed_around_until_none_is_left() -> None:
    sends = [(10, "r0", [["r4", "msg", "cross", MIB], ["r2", "msg", "local", 0]])]
    world, _ = with_faults(partition(spines=[0, 1, 2]), sends)
    assert times(world, "r4") == [10 + 10_500 + 20_972]
    route = world.fabric["route"]
    busy = world.fabric["link_busy_until_ns"]
    assert [busy[route[4] + spine] > 0 for spine in range(4)] == [
        False,
        False,
        False,
        True,
    ]  # leaf_up[l0->s*]
    world, _ = with_faults(partition(spines=[0, 1, 2, 3]), sends)
    assert arrivals(world, "r4") == [] and len(arrivals(world, "r2")) == 1
    world, _ = with_faults(
        partition(links=["nic_out[r0]"]), [(10, "r0", [["r2", "msg", "nic", 0], ["r1", "msg", "nvlink", 0]])]
    )
    assert arrivals(world, "r2") == [] and len(arrivals(world, "r1")) == 1


def test_a_slow_node_has_slower_links_and_kernels_for_its_window() -> None:
    def kernel(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s", "k", 100, done_kind="done", payload=ctx.now)

    slow = [
        {
            "kind": "slow",
            "target": "r0",
            "t_start": 0,
            "t_end": 100_000,
            "params": {"bandwidth_factor": 0.25, "compute_factor": 4},
        }
    ]
    scenario = probe_scenario(go=kernel)
    world = probe_world(scenario, faults=slow)
    world.schedule(10, "r0", "go", [["r2", "msg", "slow", MIB]])
    world.schedule(200_000, "r0", "go", [["r2", "msg", "fast", MIB]])
    run(scenario, world)
    # 1 MiB at a quarter of 400 Gb/s: ceil(1048576e9 / 12.5e9) = 83887 ns.
    assert times(world, "r2") == [10 + HOP_NS + 83_887, 200_000 + HOP_NS + 20_972]
    assert arrivals(world, "r0") == [[410, "done", 10], [200_100, "done", 200_000]]
    assert world.fabric["link_bytes_per_s"][2 * 16] == 50 * 10**9


def test_corrupting_a_buffer_flips_exactly_one_bit() -> None:
    record = {"kind": "corrupt", "target": "r0", "t_start": 5, "params": {"buffer": "grad"}}
    scenario = probe_scenario()
    world = probe_world(scenario, faults=[record])
    original = np.arange(16, dtype=np.float32)
    world.nodes["r0"]["buffers"]["grad"] = original.copy()
    run(scenario, world)
    changed = world.nodes["r0"]["buffers"]["grad"].view(np.uint32) ^ original.view(np.uint32)
    assert sum(bin(int(word)).count("1") for word in changed) == 1
    assert world.fabric["fault_hits"] == {"f1": 1}
    pinned = dict(record, params={"buffer": "grad", "element": 3, "bit": 31})
    world = probe_world(scenario, faults=[pinned])
    world.nodes["r0"]["buffers"]["grad"] = original.copy()
    run(scenario, world)
    assert world.nodes["r0"]["buffers"]["grad"][3] == -3.0


def test_corrupting_in_flight_changes_one_message_and_never_the_senders_copy() -> None:
    record = {"kind": "corrupt", "target": "r0", "t_start": 0, "t_end": 100_000, "params": {}}
    payload = np.ones(8, dtype=np.float32)
    world, _ = with_faults(
        [record],
        [
            (
                10,
                "r0",
                [["r2", "msg", [7, {"chunk": payload}], 32], ["r2", "msg", [8, {"chunk": payload}], 32]],
            )
        ],
    )
    first, second = arrivals(world, "r2")
    assert first[2][0] == 7 and not np.array_equal(first[2][1]["chunk"], payload)
    flipped = first[2][1]["chunk"].view(np.uint32) ^ payload.view(np.uint32)
    assert sum(bin(int(word)).count("1") for word in flipped) == 1
    assert np.array_equal(second[2][1]["chunk"], payload)
    assert not first[2][1]["chunk"].flags.writeable
    assert world.fabric["fault_hits"] == {"f1": 1}


def crash_hooks(log: list[Any]) -> fabric.Hooks:
    def on_crash(state: dict[str, Any], ctx: Context, record: dict[str, Any]) -> None:
        log.append(["crash", ctx.now, ctx.node, record["id"]])

    def on_restart(state: dict[str, Any], ctx: Context, record: dict[str, Any]) -> None:
        log.append(["restart", ctx.now, ctx.node, record["id"]])

    return fabric.Hooks(on_crash=on_crash, on_restart=on_restart)


def test_a_crash_takes_the_node_down_loses_its_gpu_work_and_restarts_through_the_hook() -> None:
    def kernel(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s", "lost", 30_000, done_kind="done", payload="lost")

    log: list[Any] = []
    crash = [{"kind": "crash", "target": "r2", "t_start": 5, "t_end": 15_000}]
    scenario = probe_scenario(go=kernel, hooks=crash_hooks(log))
    world = probe_world(scenario, faults=crash)
    world.schedule(0, "r2", "go", [])
    world.schedule(0, "r0", "go", [["r2", "msg", "while down", 0]])
    world.schedule(20_000, "r0", "go", [["r2", "msg", "after restart", 0]])
    run(scenario, world)
    assert log == [["crash", 5, "r2", "f1"], ["restart", 15_000, "r2", "f1"]]
    # "while down" arrived at 9600 and was dropped; the kernel's completion at 30000 comes after
    # the restart but belongs to the old epoch: it is recognised as stale and never delivered.
    assert arrivals(world, "r2") == [[20_000 + HOP_NS, "msg", "after restart"]]
    assert world.down == {} and world.nodes["r2"]["gpu"]["epoch"] == 1


def test_without_a_restart_hook_a_crashed_node_stays_down() -> None:
    crash = [{"kind": "crash", "target": "r2", "t_start": 5, "t_end": 50}]
    world, _ = with_faults(crash, [(20_000, "r0", [["r2", "msg", "lost", 0]])])
    assert arrivals(world, "r2") == [] and world.down == {"r2": 5}
    assert any("stays down" in entry[2] for entry in world.log)


def message_fault(kind: str, **params: Any) -> list[dict[str, Any]]:
    return [{"kind": kind, "target": "r0", "t_start": 0, "t_end": 100_000, "params": params}]


def test_drop_obeys_count_kinds_and_direction() -> None:
    sends = [
        (10, "r0", [["r2", "msg", 1, 0], ["r2", "other", 2, 0], ["r2", "msg", 3, 0]]),
        (10, "r2", [["r0", "msg", 4, 0]]),
    ]
    world, _ = with_faults(message_fault("drop"), sends)
    assert arrivals(world, "r2") == [] and len(arrivals(world, "r0")) == 1
    world, _ = with_faults(message_fault("drop", count=1), sends)
    assert [entry[2] for entry in arrivals(world, "r2")] == [2, 3]
    world, _ = with_faults(message_fault("drop", kinds=["other"]), sends)
    assert [entry[2] for entry in arrivals(world, "r2")] == [1, 3]
    world, _ = with_faults(message_fault("drop", direction="in"), sends)
    assert len(arrivals(world, "r2")) == 3 and arrivals(world, "r0") == []


def test_a_drop_with_probability_is_a_chance_per_message() -> None:
    sends = [(10, "r0", [["r2", "msg", index, 0] for index in range(200)])]
    world, _ = with_faults(message_fault("drop", probability=0.25), sends)
    dropped = world.fabric["fault_hits"]["f1"]
    assert 200 - len(arrivals(world, "r2")) == dropped and 25 <= dropped <= 75


def test_duplicate_delivers_a_second_copy_after_the_gap() -> None:
    world, _ = with_faults(message_fault("duplicate", gap_ns=1_000), [(10, "r0", [["r2", "msg", "x", 0]])])
    assert times(world, "r2") == [10 + HOP_NS, 10 + HOP_NS + 1_000]


def test_reorder_lets_a_later_message_overtake() -> None:
    scenario = probe_scenario()
    world = probe_world(scenario, faults=message_fault("reorder", window_ns=50_000))
    world.schedule(10, "r0", "go", [["r2", "msg", "first", 0], ["r2", "msg", "second", 0]])
    overrides = {("r0", "fault.f1.reorder.delay", 0): 40_000, ("r0", "fault.f1.reorder.delay", 1): 0}
    Simulation(scenario, world, overrides=overrides).run()
    assert arrivals(world, "r2") == [[10 + HOP_NS, "msg", "second"], [10 + HOP_NS + 40_000, "msg", "first"]]


def test_delay_adds_its_time() -> None:
    world, _ = with_faults(message_fault("delay", delay_ns=70_000), [(10, "r0", [["r2", "msg", "x", 0]])])
    assert times(world, "r2") == [10 + HOP_NS + 70_000]


# -- every kind shows its effect and can be removed --------------------------------------------


KIND_RECORDS = {
    "partition": {"kind": "partition", "target": "r0", "t_start": 0, "t_end": 50_000},
    "slow": {"kind": "slow", "target": "r0", "t_start": 0, "t_end": 50_000},
    "corrupt": {"kind": "corrupt", "target": "r0", "t_start": 0, "params": {"buffer": "grad"}},
    "crash": {"kind": "crash", "target": "r0", "t_start": 0, "t_end": 50_000},
    "drop": {"kind": "drop", "target": "r0", "t_start": 0, "t_end": 50_000},
    "duplicate": {"kind": "duplicate", "target": "r0", "t_start": 0, "t_end": 50_000},
    "reorder": {"kind": "reorder", "target": "r0", "t_start": 0, "t_end": 50_000},
    "delay": {"kind": "delay", "target": "r0", "t_start": 0, "t_end": 50_000},
}


def traffic_trace(faults: Any, remove: str | None = None) -> list[Any]:
    """r0 runs a kernel and exchanges messages (with a numpy payload) with r2; what everyone saw."""

    def kernel(state: dict[str, Any], ctx: Context) -> None:
        fabric.launch(ctx, "s", "k", 1_000, done_kind="done", payload="k")

    scenario = probe_scenario(go=kernel)
    world = probe_world(scenario, faults=faults)
    world.nodes["r0"]["buffers"]["grad"] = np.arange(8, dtype=np.float32)
    world.schedule(
        10, "r0", "go", [["r2", "msg", [index, np.full(4, index, np.float32)], 4_096] for index in range(6)]
    )
    world.schedule(10, "r2", "go", [["r0", "msg", "reply", 4_096]])
    if remove is not None:
        fabric.remove_fault(world, remove)
    run(scenario, world, overrides={("r0", "fault.f1.reorder.delay", 0): 30_000})
    return [
        arrivals(world, "r0"),
        arrivals(world, "r2"),
        world.nodes["r0"]["buffers"]["grad"].tobytes(),
        sorted(world.down),
    ]


def same_trace(left: list[Any], right: list[Any]) -> bool:
    return repr(left) == repr(right)


@pytest.mark.parametrize("kind", fabric.FAULT_KINDS)
def test_each_fault_kind_shows_its_effect_and_is_removable(kind: str) -> None:
    baseline = traffic_trace("none")
    faulty = traffic_trace([KIND_RECORDS[kind]])
    assert not same_trace(faulty, baseline), f"{kind} had no visible effect"
    assert same_trace(traffic_trace([KIND_RECORDS[kind]], remove="f1"), baseline)


def test_the_fault_is_an_event_of_its_own_at_its_target() -> None:
    scenario = probe_scenario()
    world = probe_world(scenario, faults=[dict(KIND_RECORDS["drop"], t_start=7, target="r5")])
    run(scenario, world)
    fault_events = [event for event in world.chain_batch if event.kind == "fault"]
    assert [(event.t, event.dst, event.payload) for event in fault_events] == [
        (7, "r5", ["f1", "start"]),
        (50_000, "r5", ["f1", "end"]),
    ]


def test_faults_can_be_added_and_removed_mid_run() -> None:
    scenario = probe_scenario()
    world = probe_world(scenario, faults=partition())
    world.schedule(60_000, "r0", "go", [["r2", "msg", "after removal", 0]])
    world.schedule(80_000, "r0", "go", [["r2", "msg", "dropped by the added fault", 0]])
    simulation = Simulation(scenario, world)
    simulation.run(until_ns=50_000)
    assert "f1" in world.fabric["message_rules"]
    fabric.remove_fault(world, "f1")
    added = fabric.add_fault(world, {"kind": "drop", "target": "r0", "t_start": "70us", "t_end": "90us"})
    assert added["id"] == "f2" and world.fabric["message_rules"] == {}
    with pytest.raises(ConfigError, match="starts before now"):
        fabric.add_fault(world, {"kind": "drop", "target": "r0", "t_start": 10})
    simulation.run()
    assert [entry[2] for entry in arrivals(world, "r2")] == ["after removal"]
    assert [record["id"] for record in world.faults] == ["f2"]


def test_expected_outcomes_follow_the_design() -> None:
    crash = {"kind": "crash", "t_end": 5}
    assert fabric.expected_outcome(crash, restartable=True) == "survivable"
    assert fabric.expected_outcome(crash, restartable=False) == "fatal"
    assert fabric.expected_outcome({"kind": "partition", "t_end": None}, True) == "fatal"
    assert fabric.expected_outcome({"kind": "corrupt", "t_end": None}, True) == "detectable"
    for kind in ("drop", "duplicate", "reorder", "delay", "slow"):
        assert fabric.expected_outcome({"kind": kind, "t_end": 9}, False) == "survivable"
    assert set(fabric.EXPECTED_OUTCOMES) == set(fabric.FAULT_KINDS)


# -- swarm ----------------------------------------------------------------------------------------


def swarm(seed: int, hooks: fabric.Hooks | None = None, **settings: Any) -> list[dict[str, Any]]:
    scenario = probe_scenario(hooks=hooks)
    return probe_world(scenario, seed, faults="swarm", **settings).faults


def test_the_same_swarm_seed_draws_the_same_schedule_and_other_seeds_differ() -> None:
    schedules = [swarm(seed) for seed in range(30)]
    assert [swarm(seed) for seed in range(30)] == schedules
    assert len({json.dumps(schedule) for schedule in schedules}) > 20
    kinds = {record["kind"] for schedule in schedules for record in schedule}
    assert kinds == set(fabric.FAULT_KINDS) - {"crash"}  # the probe cannot restart nodes
    for schedule in schedules:
        assert len(schedule) <= 8
        assert [record["id"] for record in schedule] == [f"f{n}" for n in range(1, len(schedule) + 1)]
        for record in schedule:
            assert 0 <= record["t_start"] < 1_000_000_000
            assert record["t_end"] is None or record["t_end"] > record["t_start"]


def test_swarm_respects_faults_max_faults_kinds_and_restartability() -> None:
    assert all(len(swarm(seed, faults_max=2)) <= 2 for seed in range(20))
    assert all(swarm(seed, faults_max=0) == [] for seed in range(5))
    only = {record["kind"] for seed in range(20) for record in swarm(seed, faults_kinds="drop,delay")}
    assert only == {"drop", "delay"}
    restartable = fabric.Hooks(on_restart=lambda state, ctx, record: None)
    assert "crash" in {record["kind"] for seed in range(30) for record in swarm(seed, restartable)}
    with pytest.raises(ConfigError, match="unknown fault kind 'meteor'"):
        swarm(0, faults_kinds="drop,meteor")


def test_a_swarm_schedule_can_be_replayed_as_an_explicit_one() -> None:
    schedule = next(s for s in (swarm(seed) for seed in range(10)) if len(s) >= 3)
    scenario = probe_scenario()
    world = probe_world(scenario, faults=json.loads(json.dumps(schedule)))
    assert world.faults == schedule


# -- bad specs ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("sometimes", "expected none, swarm, a JSON list"),
        ({"kind": "drop"}, "expected none, swarm, a JSON list"),
        ([{"kind": "meteor", "target": "r0", "t_start": 0}], "kind must be one of partition"),
        ([{"kind": "drop", "target": "r99", "t_start": 0}], "target must be a node name"),
        ([{"kind": "drop", "target": "r0"}], "t_start is required"),
        ([{"kind": "drop", "target": "r0", "t_start": "5ms", "t_end": "1ms"}], "is before t_start"),
        ([{"kind": "drop", "target": "r0", "t_start": "soon"}], "not a time"),
        (
            [{"kind": "drop", "target": "r0", "t_start": 0, "params": {"probability": 2}}],
            "params.probability: expected a probability",
        ),
        (
            [{"kind": "drop", "target": "r0", "t_start": 0, "params": {"ttl": 1}}],
            "drop has no parameter 'ttl'",
        ),
        ([{"kind": "drop", "target": "r0", "t_start": 0, "colour": "red"}], "unknown field 'colour'"),
        (
            [
                {"id": "f1", "kind": "drop", "target": "r0", "t_start": 0},
                {"id": "f1", "kind": "delay", "target": "r0", "t_start": 0},
            ],
            "fault id f1 appears twice",
        ),
        ([{"id": "x7", "kind": "drop", "target": "r0", "t_start": 0}], "id must look like f1"),
        (
            [{"kind": "partition", "target": "r0", "t_start": 0, "params": {"links": ["nic_out[r99]"]}}],
            "is not a link of this fabric",
        ),
        (
            [{"kind": "partition", "target": "r0", "t_start": 0, "params": {"spines": [0], "nodes": ["r1"]}}],
            "either links/spines or nodes/peers",
        ),
        (
            [{"kind": "slow", "target": "r0", "t_start": 0, "params": {"bandwidth_factor": 3}}],
            "bandwidth factor is in (0, 1]",
        ),
        (
            [{"kind": "partition", "target": "ctl", "t_start": 0, "params": {"scope": "host"}}],
            "scope host needs a rank",
        ),
    ],
)
def test_bad_fault_specs_are_one_line_config_errors(spec: Any, message: str) -> None:
    scenario = probe_scenario()
    with pytest.raises(ConfigError) as caught:
        probe_world(scenario, faults=spec)
    assert message in str(caught.value) and "\n" not in str(caught.value)
    assert str(caught.value).startswith("config key 'faults")


def test_ids_are_kept_and_gaps_filled_never_renumbered() -> None:
    spec = [
        {"id": "f3", "kind": "drop", "target": "r0", "t_start": "1ms"},
        {"kind": "delay", "target": "r1", "t_start": "2", "t_end": 3_000_000},
        {"kind": "delay", "target": "r1", "t_start_ns": 5, "note": "a comment for humans"},
    ]
    world = probe_world(probe_scenario(), faults=spec)
    # Ints are ns; text is a time, in ms without a unit; t_start_ns spells the same int field.
    assert [(record["id"], record["t_start"], record["t_end"]) for record in world.faults] == [
        ("f3", 1_000_000, None),
        ("f1", 2_000_000, 3_000_000),
        ("f2", 5, None),
    ]
    assert "t_start_ns" not in world.faults[2] and "note" not in world.faults[2]


def test_count_limits_hits_so_a_smaller_count_is_always_milder() -> None:
    sends = [(10, "r0", [["r2", "msg", index, 0] for index in range(4)])]
    delivered = []
    for count in (None, 3, 1, 0):
        world, _ = with_faults(message_fault("drop", count=count), sends)
        delivered.append(len(arrivals(world, "r2")))
    assert delivered == [0, 1, 3, 4]


def test_the_cli_reports_a_bad_schedule_in_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Any
) -> None:
    bad = tmp_path / "faults.json"
    bad.write_text(json.dumps([{"kind": "drop", "target": "nobody", "t_start": 0}]))
    code = cli_main(
        ["run", "fabric_example", "--scenario", "fabric_example:SCENARIO", "--set", f"faults=@{bad}"]
    )
    error = capsys.readouterr().err
    assert code == 2
    assert (
        error
        == "timetravel: error: config key 'faults': fault f1: target must be a node name, got 'nobody'\n"
    )


def test_a_message_held_by_a_partition_meets_other_faults_only_when_it_is_sent_again() -> None:
    faults = [
        {"kind": "delay", "target": "r0", "t_start": 0, "t_end": 1_000_000, "params": {"delay_ns": 1_000}},
        {"kind": "partition", "target": "r0", "t_start": 0, "t_end": 50_000, "params": {"mode": "hold"}},
    ]
    world, _ = with_faults(faults, [(10, "r0", [["r2", "msg", "x", 0]])])
    assert times(world, "r2") == [50_000 + HOP_NS + 1_000]
    assert world.fabric["fault_hits"] == {"f1": 1, "f2": 1}
