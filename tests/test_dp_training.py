"""dp_training as a user runs it: reduction orders, fidelity of the collectives, detectors, CLI."""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

import numpy as np
import pytest

from timetravel import fabric
from timetravel.scenarios import get_scenario
from timetravel.scenarios.dp_training import reference, tree
from timetravel.scenarios.dp_training.model import layout_for
from timetravel.sim import ConfigError, Context, Simulation, World, check_plain
from timetravel.sim.runner import run_report

SCENARIO = get_scenario("dp_training")
SMALL = {"ranks": 8, "steps": 6, "params": 256}
QUIET = {**SMALL, "network_jitter": 0, "compute_jitter": 0}
"""No network or compute jitter: every time below is exact arithmetic on the defaults."""
COMPUTE_NS = 9_000_000  # model_flops 9e11 / (100 TFLOP/s = 1e5 FLOP/ns)
HOP_NS = 3_401
"""8 ranks share one host: a ring chunk of <= 450 bytes crosses NVLink in 3.4 us plus 1 ns on the wire."""
RING_8_NS = 14 * HOP_NS  # 2(N-1) ring steps
UPDATE_TAIL_NS = 20_000 + 50_000  # unpack, then the optimizer kernel
STEP_1_DONE_NS = COMPUTE_NS + RING_8_NS + UPDATE_TAIL_NS


def run(seed: int = 0, base: dict[str, Any] | None = None, **settings: Any) -> tuple[dict[str, Any], World]:
    """Run one seed of ``base`` updated by ``settings`` to the end."""
    return run_report(SCENARIO, SCENARIO.resolve_config({**(base or {}), **settings}), seed)


def build(base: dict[str, Any] | None = None, **settings: Any) -> World:
    return SCENARIO.build(SCENARIO.resolve_config({**(base or {}), **settings}), 0)


def finish(world: World, scenario: Any = SCENARIO) -> Any:
    return Simulation(scenario, world).run()


# -- the article's claim: canonical order is reproducible, arrival order is not ------------------


@pytest.mark.parametrize("algorithm", ["ring", "tree", "naive"])
def test_canonical_order_gives_bit_identical_weights_across_seeds(algorithm: str) -> None:
    reports = [run(seed, SMALL, allreduce=algorithm)[0] for seed in range(4)]
    assert {report["outcome"] for report in reports} == {"pass"}
    assert len({report["hash_chain"] for report in reports}) == 4  # the seeds did change the timing
    hashes = {report["summary"]["weights_hash"] for report in reports}
    expected = reference.reference(SCENARIO.resolve_config({**SMALL, "allreduce": algorithm})).digests[-1]
    assert hashes == {f"{expected:016x}"}


@pytest.mark.parametrize("algorithm", ["tree", "naive"])
def test_arrival_order_differs_across_seeds_yet_repeats_within_one(algorithm: str) -> None:
    settings = {**SMALL, "allreduce": algorithm, "reduce_order": "arrival"}
    hashes = [run(seed, **settings)[0]["summary"]["weights_hash"] for seed in range(4)]
    assert len(set(hashes)) > 1
    again = run(2, **settings)[0]
    assert again["summary"]["weights_hash"] == hashes[2]
    assert again["outcome"] == "pass"


def test_fault_free_run_passes_the_oracle_for_every_algorithm_and_dtype() -> None:
    for settings in (
        {"allreduce": "ring"},
        {"allreduce": "tree", "tree_chunk_bytes": 256},
        {"allreduce": "naive", "ranks": 5},
        {"dtype": "bfloat16", "reduce_dtype": "float32"},
        {"dtype": "bfloat16", "reduce_dtype": "bfloat16", "allreduce": "tree"},
        {"optimizer": "adam", "lr": 0.003, "reduce_dtype": "float64"},
    ):
        report, _world = run(3, **{**SMALL, "oracle": True, **settings})
        assert report["outcome"] == "pass", (settings, report["failure"])
        assert report["summary"]["steps"] == SMALL["steps"]


def test_training_learns_and_the_world_records_its_metrics() -> None:
    report, world = run(0, ranks=4, steps=40)
    losses = [value for _, node, value in world.metrics["loss"]]
    assert len(losses) == 40 and {node for _, node, _ in world.metrics["loss"]} == {"r0"}
    assert losses[-1] < losses[0] / 5
    assert report["summary"]["final_loss"] == losses[-1]
    assert len(world.metrics["grad_norm"]) == 40
    step_times = [value for _, _, value in world.metrics["step_time_ns"]]
    assert all(COMPUTE_NS < value < COMPUTE_NS + 1_000_000 for value in step_times)
    check_plain(world.to_data())


def test_same_seed_same_bits_and_events() -> None:
    settings = {**SMALL, "allreduce": "tree", "reduce_order": "arrival"}
    first, _ = run(9, **settings)
    second, _ = run(9, **settings)
    assert (first["state_hash"], first["hash_chain"]) == (second["state_hash"], second["hash_chain"])


# -- fidelity: the collectives against their alpha-beta models ------------------------------------


def one_allreduce(ranks: int, **settings: Any) -> tuple[int, int, dict[str, Any]]:
    """Duration of step 1's all-reduce, the bucket bytes and the config, on a uniform fabric.

    One GPU per host and every host under one leaf: every ring edge and tree edge is the same
    path (NIC out, leaf, NIC in), with alpha = network_latency and B = the NIC bandwidth, and no
    two messages of one step share a link (no contention). The NICs run at 8 Gb/s (1 byte/ns), so
    that the bandwidth term of a 256 KiB bucket matters next to the latency term.
    """
    config = SCENARIO.resolve_config(
        {
            **QUIET,
            "ranks": ranks,
            "steps": 1,
            "params": 65_536,
            "gpus_per_host": 1,
            "leaf_radix": max(4, 2 * ranks),
            "nic_gbit_per_s": 8,
            **settings,
        }
    )
    world = SCENARIO.build(config, 0)
    assert finish(world).outcome == "pass"
    states = [world.nodes[f"r{index}"] for index in range(ranks)]
    assert {state["coll_entered_ns"] for state in states} == {COMPUTE_NS}
    finished_ns = max(state["coll_done_ns"] for state in states)
    return finished_ns - COMPUTE_NS, (layout_for(config["params"]).params + 1) * 4, config


BYTES_PER_NS = 1  # 8 Gb/s


@pytest.mark.parametrize("ranks", [8, 64])
def test_ring_allreduce_takes_the_alpha_beta_time(ranks: int) -> None:
    measured_ns, size_bytes, config = one_allreduce(ranks)
    alpha_term_ns = 2 * (ranks - 1) * config["network_latency"]
    model_ns = alpha_term_ns + 2 * (ranks - 1) / ranks * size_bytes / BYTES_PER_NS
    assert abs(measured_ns - model_ns) <= 0.05 * model_ns
    # and the bandwidth term is really in play: alpha alone would be far more than 5% off
    assert model_ns - alpha_term_ns > 0.25 * model_ns


def test_ring_on_the_default_cluster_takes_twice_the_sum_of_its_edges() -> None:
    # 16 ranks on two 8-GPU hosts: 14 ring edges are NVLink, 2 cross the network. A ring is a
    # pipeline: its critical path is 2N-2 hops that cross every edge twice except the fastest
    # one, so it is not 2(N-1) times the slowest edge (that is 2.3x too slow here)
    settings = {**QUIET, "ranks": 16, "steps": 1, "params": 2048}
    world = SCENARIO.build(SCENARIO.resolve_config(settings), 0)
    assert finish(world).outcome == "pass"
    states = [world.nodes[f"r{index}"] for index in range(16)]
    measured_ns = max(state["coll_done_ns"] for state in states) - COMPUTE_NS
    config = world.config
    chunk_bytes = (layout_for(2048).params + 1) * 4 / 16
    nvlink_ns = config["nvlink_latency"] + chunk_bytes / config["nvlink_gbyte_per_s"]
    network_ns = config["network_latency"] + chunk_bytes / (config["nic_gbit_per_s"] / 8)
    edges_ns = [network_ns if index % 8 == 7 else nvlink_ns for index in range(16)]
    model_ns = 2 * sum(edges_ns) - 2 * min(edges_ns)
    assert abs(measured_ns - model_ns) <= 0.01 * model_ns


@pytest.mark.parametrize("ranks", [7, 63])
def test_tree_allreduce_takes_its_own_model_time(ranks: int) -> None:
    # a perfect binary tree, the bucket in one chunk: each level of the reduce costs alpha plus two
    # chunks on the parent's NIC (both children send at once), and the broadcast mirrors it
    measured_ns, size_bytes, config = one_allreduce(ranks, allreduce="tree", tree_chunk_bytes=1 << 20)
    depth = tree.depth(ranks)
    model_ns = 2 * depth * (config["network_latency"] + 2 * size_bytes / BYTES_PER_NS)
    assert abs(measured_ns - model_ns) <= 0.05 * model_ns


# -- detectors, each on a world broken on purpose --------------------------------------------------


def test_collective_mismatch_names_both_collectives() -> None:
    world = build(QUIET)
    world.nodes["r3"]["step"] = 1  # r3 believes step 1 is done: it issues its first all-reduce for step 2
    result = finish(world)
    assert result.failure["kind"] == "collective_mismatch"
    # the first message of the ring reaches r3 one latency after the all-reduce began
    assert (result.failure["node"], result.failure["t_ns"]) == ("r3", COMPUTE_NS + HOP_NS)
    assert "step 2" in result.failure["message"] and "r2 sent collective #0" in result.failure["message"]


@pytest.mark.parametrize(("algorithm", "waiting"), [("ring", {"r6": ["r5"]}), ("naive", {"r0": ["r5"]})])
def test_hang_reports_a_flight_recorder_that_leads_to_the_dead_rank(
    algorithm: str, waiting: dict[str, Any]
) -> None:
    world = build(QUIET, allreduce=algorithm, hang_timeout=50_000_000)
    world.down["r5"] = 0  # r5 never starts: every message to it is lost
    result = finish(world)
    failure = world.failures[0]
    assert (failure["kind"], failure["node"]) == ("hang", "r5")
    # the ranks entered the all-reduce at 9 ms; their watchdogs report it hang_timeout later
    assert failure["t_ns"] == COMPUTE_NS + 50_000_000
    assert result.stop == "failure"
    rows = {row["rank"]: row for row in failure["flight_recorder"]}
    assert rows["r5"]["phase"] == "down"
    for rank, waits_on in waiting.items():
        assert rows[rank]["waits_on"] == waits_on
        assert rows[rank]["entered"] == [0, 1, COMPUTE_NS] and rows[rank]["completed"] == [-1, 0, -1]
    assert "the waits lead to r5" in failure["message"].splitlines()[0]


def test_nan_in_one_replica_is_caught_after_the_guard() -> None:
    world = build(QUIET)
    world.nodes["r2"]["weights"][0] = np.nan
    result = finish(world)
    # r2's NaN gradient makes every rank skip step 1 alike; r2's own weights stay NaN
    assert (result.failure["kind"], result.failure["node"]) == ("nan", "r2")
    assert result.failure["t_ns"] == STEP_1_DONE_NS
    assert world.nodes["r0"]["skipped_steps"] == 1


def test_divergence_names_the_odd_replica_at_the_check_step() -> None:
    world = build(QUIET, check_every=2)
    world.nodes["r4"]["weights"][7] += np.float32(1e-3)
    result = finish(world)
    assert (result.failure["kind"], result.failure["node"]) == ("divergence", "r4")
    assert "by step 2: r4 hold" in result.failure["message"]
    assert world.nodes["r0"]["step"] == 2


def test_blowup_bound_is_checked_on_the_global_loss() -> None:
    report, world = run(0, QUIET, blowup_loss=0.5)
    failure = report["failure"]
    assert failure["kind"] == "blowup"
    rank = world.nodes[failure["node"]]
    assert rank["step"] == 1 and rank["loss"] > 0.5 and failure["t_ns"] == rank["progress_ns"]
    assert failure["t_ns"] == STEP_1_DONE_NS


def test_oracle_catches_a_rank_whose_maths_left_the_reference() -> None:
    world = build(QUIET, oracle=True)
    world.nodes["r6"]["inputs"][0, 0, 0] += np.float32(0.25)  # one input of one sample of r6's shard
    result = finish(world)
    assert result.failure["kind"] == "oracle"
    assert result.failure["t_ns"] == STEP_1_DONE_NS
    assert "after step 1 differ from the fault-free run" in result.failure["message"]


def flip(target: str, at: str, element: int, bit: int) -> list[dict[str, Any]]:
    """A schedule of one bit flip in ``target``'s gradient buffer."""
    params = {"buffer": "grad", "element": element, "bit": bit}
    return [{"kind": "corrupt", "target": target, "t_start": at, "params": params}]


B2_LAST = layout_for(256).params - 1
"""The gradient of the last output bias: never zero, so flipping its exponent's top bit gives ~1e37."""


def test_step_guard_skips_on_every_rank_alike_and_local_guard_does_not() -> None:
    # 12 ms is inside step 2's backward kernel (9.12 ms to 18.12 ms): the flip is latched into the
    # gradient r3 produces, whose norm becomes ~1e37
    faults = flip("r3", "12ms", B2_LAST, 30)
    report, world = run(0, QUIET, steps=8, check_every=4, faults=faults)
    assert report["outcome"] == "pass" and report["summary"]["faults"]["hit"] == 1
    assert {world.nodes[f"r{index}"]["skipped_steps"] for index in range(8)} == {1}
    report, world = run(0, QUIET, steps=8, check_every=4, faults=faults, bug="local_guard")
    assert (report["failure"]["kind"], report["failure"]["node"]) == ("divergence", "r3")
    assert "by step 4: r3 hold" in report["failure"]["message"]
    assert world.nodes["r3"]["skipped_steps"] == 1 and world.nodes["r0"]["skipped_steps"] == 0


def test_a_flip_after_the_all_reduce_finds_no_gradient_awaiting_it() -> None:
    # a corrupt fault on "grad" hits the gradient on its way to the all-reduce; while step 1's
    # optimizer runs there is none, so nothing flips
    at_ns = COMPUTE_NS + RING_8_NS + 20_000 + 25_000
    report, _ = run(
        0, QUIET, steps=4, check_every=2, oracle=True, faults=flip("r5", f"{at_ns}ns", B2_LAST, 30)
    )
    assert report["outcome"] == "pass" and report["summary"]["faults"]["hit"] == 0


# -- faults from the fabric, and what the correct code makes of them --------------------------------


def test_crash_with_elastic_restart_from_a_checkpoint_keeps_the_weights_exact() -> None:
    crash = [{"kind": "crash", "target": "r3", "t_start": "25ms", "t_end": "30ms"}]
    report, world = run(0, QUIET, checkpoint_every=2, oracle=True, faults=crash)
    assert report["outcome"] == "pass", report["failure"]  # the oracle compared every step
    assert report["summary"]["restarts"] == 1 and world.nodes["r3"]["crashes"] == 1
    assert {world.nodes[f"r{index}"]["restores"] for index in range(8)} == {1}
    storage = world.nodes["storage"]
    assert [entry[0] for entry in storage["checkpoints"]] == [4, 6] and storage["loads"] == 8
    # step 3 was under way at 25 ms; every rank went back to the step-2 checkpoint and redid it
    step_3_ends = [t for t, _, _ in world.metrics["step_time_ns"]][2]
    assert step_3_ends > 30_000_000 > 3 * COMPUTE_NS


def test_restart_without_momentum_is_caught_by_the_oracle_only() -> None:
    crash = [{"kind": "crash", "target": "r3", "t_start": "25ms", "t_end": "30ms"}]
    report, _ = run(0, QUIET, checkpoint_every=2, faults=crash, bug="restart_without_momentum")
    assert report["outcome"] == "pass"  # the replicas agree with each other...
    report, _ = run(0, QUIET, checkpoint_every=2, faults=crash, bug="restart_without_momentum", oracle=True)
    assert report["failure"]["kind"] == "oracle"  # ...but not with the fault-free run
    assert "after step 3 differ" in report["failure"]["message"]


def test_a_healed_partition_is_survived_by_retransmission() -> None:
    cut = [
        {"kind": "partition", "target": "r2", "t_start": "9ms", "t_end": "15ms", "params": {"mode": "drop"}}
    ]
    report, _ = run(0, QUIET, oracle=True, faults=cut)
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["faults"]["hit"] == 1 and report["summary"]["resends"] > 0
    held = [{**cut[0], "params": {"mode": "hold"}}]
    report, _ = run(0, QUIET, oracle=True, faults=held)
    assert report["outcome"] == "pass" and report["summary"]["faults"]["hit"] == 1


def test_a_partition_that_never_heals_is_a_hang() -> None:
    cut = [{"kind": "partition", "target": "r2", "t_start": "9ms", "params": {"mode": "drop"}}]
    report, world = run(0, QUIET, hang_timeout=100_000_000, faults=cut)
    assert (report["failure"]["kind"], report["failure"]["node"]) == ("hang", "r2")
    assert "the waits form a cycle" in report["failure"]["message"]  # every rank waits: r2 got least far
    assert report["failure"]["t_ns"] == COMPUTE_NS + 100_000_000
    assert {row["rank"]: row["waits_on"] for row in world.failures[0]["flight_recorder"]}["r3"] == ["r2"]


def test_a_restart_that_cannot_complete_is_a_hang_naming_the_rank() -> None:
    # r5 crashes and comes back, but a partition that never heals cuts it off the controller:
    # it repeats rank_ready until it has waited hang_timeout, then the monitor judges the job
    faults = [
        {"kind": "crash", "target": "r5", "t_start": "25ms", "t_end": "30ms"},
        {"kind": "partition", "target": "r5", "t_start": "27ms", "params": {"mode": "drop"}},
    ]
    report, _ = run(0, QUIET, hang_timeout=100_000_000, faults=faults)
    failure = report["failure"]
    assert (failure["kind"], failure["node"]) == ("hang", "r5")
    assert "an elastic restart did not complete: r5 is joining" in failure["message"].splitlines()[0]
    assert failure["t_ns"] == 30_000_000 + 100_000_000  # r5 rejoined at 30 ms and waited 100 ms


@pytest.mark.parametrize(
    "fault",
    [
        {"kind": "slow", "params": {"compute_factor": 4.0, "bandwidth_factor": 0.1}},
        {"kind": "drop", "params": {"probability": 0.5}},
        {"kind": "duplicate", "params": {"gap_ns": 1_000}},
        {"kind": "reorder", "params": {"window_ns": 20_000}},
        {"kind": "delay", "params": {"delay_ns": 300_000}},
    ],
    ids=lambda fault: fault["kind"],
)
def test_survivable_faults_leave_every_step_bit_identical(fault: dict[str, Any]) -> None:
    schedule = [{"target": "r4", "t_start": "5ms", "t_end": "40ms", **fault}]
    report, _ = run(1, SMALL, oracle=True, faults=schedule)
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["faults"]["hit"] == 1


def test_a_flip_in_flight_is_caught_by_the_checksum_and_resent() -> None:
    # r1 sends ring step p of step 1 at 9 ms + p hops; from 9.023 ms on the next one is step 7,
    # the first of the all-gather
    gather = [
        {
            "kind": "corrupt",
            "target": "r1",
            "t_start": f"{COMPUTE_NS + 7 * HOP_NS - 500}ns",
            "t_end": "30ms",
            "params": {"kinds": ["ring"], "bit": 30, "count": 1},
        }
    ]
    report, world = run(0, QUIET, oracle=True, faults=gather)
    assert report["outcome"] == "pass" and report["summary"]["faults"]["hit"] == 1
    assert world.nodes["r2"]["checksum_drops"] == 1 and world.nodes["r1"]["resends"] == 1
    # without checksums the flipped chunk lands: r1 keeps the true chunk, the seven others take
    # the flipped one, and the replica check sees them part
    report, _ = run(0, QUIET, check_every=1, checksums=False, faults=gather)
    assert report["failure"]["kind"] == "divergence" and report["failure"]["node"] == "r1"
    # from 9 ms the next is step 0 of the reduce-scatter: the flipped partial sum reaches every
    # rank alike, so the guard skips (or the small error is applied) on all of them together
    scatter = [{**gather[0], "t_start": "9ms"}]
    report, world = run(0, QUIET, check_every=1, checksums=False, faults=scatter)
    assert report["outcome"] == "pass" and report["summary"]["faults"]["hit"] == 1
    assert len({world.nodes[f"r{index}"]["skipped_steps"] for index in range(8)}) == 1


def test_missing_wait_is_a_race_on_every_seed_and_a_divergence_without_the_detector() -> None:
    for seed in range(3):
        report, _ = run(seed, SMALL, steps=2, bug="missing_wait")
        assert report["failure"]["signature"] == "race:gpu.race.grad"
        assert report["failure"]["t_ns"] < 10_000_000  # in step 1
    report, _ = run(0, SMALL, steps=4, check_every=2, bug="missing_wait", race_detector=False)
    assert report["failure"]["kind"] == "divergence"
    report, _ = run(0, SMALL, steps=4, check_every=2, race_detector=False)
    assert report["outcome"] == "pass"


# -- config and CLI --------------------------------------------------------------------------------


def test_config_keys_of_the_issue_exist_with_those_names() -> None:
    names = {param.name for param in SCENARIO.params}
    required = {
        "ranks",
        "gpus_per_host",
        "steps",
        "params",
        "dtype",
        "allreduce",
        "reduce_order",
        "faults",
        "faults_max",
        "bug",
        "preset",
        "data_seed",
        "hang_timeout",
        "check_every",
        "grad_skip_norm",
        "oracle",
        "race_detector",
    }
    assert required <= names
    assert SCENARIO.param("allreduce").choices == ("ring", "tree", "naive")
    assert SCENARIO.param("reduce_order").choices == ("canonical", "arrival")


def test_oracle_needs_canonical_order() -> None:
    with pytest.raises(ConfigError, match="oracle=on needs reduce_order=canonical"):
        build(SMALL, oracle=True, reduce_order="arrival")


def test_data_seed_changes_the_maths_but_not_the_simulation_seed() -> None:
    base, _ = run(0, SMALL)
    other_data, _ = run(0, SMALL, data_seed=1)
    assert base["summary"]["weights_hash"] != other_data["summary"]["weights_hash"]


def test_cli_json_summary(run_cli: Any) -> None:
    completed = run_cli("run", "dp_training", "--seed", "4", "--set", "ranks=4", "--set", "steps=5", "--json")
    assert completed.returncode == 0, completed.stderr
    report = json.loads(completed.stdout)
    summary = report["summary"]
    assert summary["steps"] == 5 and math.isfinite(summary["final_loss"])
    expected = reference.reference(SCENARIO.resolve_config({"ranks": 4, "steps": 5})).digests[-1]
    assert summary["weights_hash"] == f"{expected:016x}"


def test_cli_rejects_bad_values_in_one_line(run_cli: Any) -> None:
    completed = run_cli("run", "dp_training", "--set", "allreduce=butterfly")
    assert completed.returncode == 2
    assert completed.stderr.count("\n") == 1 and "allreduce" in completed.stderr
    completed = run_cli("run", "dp_training", "--set", "oracle=on", "--set", "reduce_order=arrival")
    assert completed.returncode == 2 and completed.stderr.startswith("timetravel: error: config key 'oracle'")


# -- retransmission and the stale_chunk bug --------------------------------------------------------


def dropping_transport(sender: str, step: int, part: int) -> Any:
    """The fabric, losing the original of one ring message (not its resend)."""

    def transport(ctx: Context, dst: str, kind: str, payload: Any, nbytes: int) -> None:
        if kind == "ring" and ctx.node == sender and payload[2] == step and payload[3] == part:
            return
        fabric.transport(ctx, dst, kind, payload, nbytes)

    return transport


def run_dropping(sender: str, step: int, part: int, **settings: Any) -> tuple[Any, World]:
    scenario = dataclasses.replace(SCENARIO, transport=dropping_transport(sender, step, part))
    world = scenario.build(scenario.resolve_config({**QUIET, "steps": 3, **settings}), 0)
    return Simulation(scenario, world).run(), world


def test_a_lost_ring_message_is_resent_and_the_weights_stay_exact() -> None:
    result, world = run_dropping("r2", 2, 5, oracle=True)
    assert result.outcome == "pass"  # the oracle compared every step with the fault-free run
    assert world.nodes["r2"]["resends"] == 1
    assert world.nodes["r3"]["resend_requests"] >= 1
    step_times = [value for _, _, value in world.metrics["step_time_ns"]]
    timeout_ns = SCENARIO.param("retransmit_timeout").default
    assert step_times[0] < COMPUTE_NS + 1_000_000 and step_times[2] < COMPUTE_NS + 1_000_000
    assert step_times[0] + timeout_ns <= step_times[1] <= step_times[0] + 3 * timeout_ns


def test_stale_chunk_bug_uses_the_previous_steps_chunk_after_a_resend() -> None:
    # a reduce-scatter step: the stale partial sum reaches every rank alike, only the oracle sees it
    result, world = run_dropping("r2", 2, 5, oracle=True, bug="stale_chunk")
    assert (result.failure["kind"], result.failure["t_ns"]) == ("oracle", world.failures[0]["t_ns"])
    assert "after step 2 differ" in result.failure["message"]
    # an all-gather step: the stale chunk reaches only the ranks after r3, the replicas split
    result, world = run_dropping("r2", 2, 10, check_every=1, bug="stale_chunk")
    assert result.failure["kind"] == "divergence" and "by step 2" in result.failure["message"]
    result, _ = run_dropping("r2", 2, 10, check_every=1)
    assert result.outcome == "pass"


# -- snapshots: every value in the world is determined by the inputs ---------------------------------


@pytest.mark.parametrize("algorithm", ["ring", "tree", "naive"])
def test_a_restored_snapshot_runs_on_to_the_same_bits(algorithm: str) -> None:
    # snapshots land mid-collective and mid-restart: a run restored from any of them must end in
    # the state of the straight run (no uninitialised memory, no array held in two places)
    from timetravel.snapshot import SnapshotStore, restore

    faults = [
        {"kind": "crash", "target": "r3", "t_start": "40ms", "t_end": "45ms"},
        {"kind": "drop", "target": "r5", "t_start": "20ms", "t_end": "90ms", "params": {"probability": 0.5}},
        {"kind": "corrupt", "target": "r1", "t_start": "100ms", "t_end": "150ms", "params": {"count": 1}},
        {
            "kind": "partition",
            "target": "r6",
            "t_start": "120ms",
            "t_end": "126ms",
            "params": {"mode": "drop"},
        },
    ]
    settings = {**SMALL, "steps": 24, "allreduce": algorithm, "faults": faults, "checkpoint_every": 4}
    config = SCENARIO.resolve_config(settings)
    straight = SCENARIO.build(config, 4)
    finish(straight)
    world = SCENARIO.build(config, 4)
    store = SnapshotStore()
    snapshots = []
    Simulation(SCENARIO, world).run(
        pause_every_events=400, on_pause=lambda sim: snapshots.append(store.take(sim.world))
    )
    assert world.state_hash() == straight.state_hash()
    assert len(snapshots) >= 3 and straight.nodes["controller"]["restarts"] >= 1
    for snapshot in snapshots[:: max(1, len(snapshots) // 3)]:
        # a little way on (a collective in flight, arrays written in place) and to the end
        restored = restore(snapshot)
        Simulation(SCENARIO, restored).run(max_events=150)
        again = SCENARIO.build(config, 4)
        Simulation(SCENARIO, again).run(max_events=snapshot.events + 150)
        assert restored.state_hash() == again.state_hash()
        finish(restored)
        assert restored.state_hash() == straight.state_hash()
