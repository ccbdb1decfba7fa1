"""dp_training at the collective level (issue 18): the same weights and, within 5%, the same
collective times as the message level; faults keep their meaning; replicas computed together give
the bits each computes alone."""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
import pytest

from timetravel.scenarios import get_scenario
from timetravel.scenarios.dp_training import model, replicas, tree, update
from timetravel.scenarios.dp_training.data import build_dataset
from timetravel.scenarios.dp_training.model import batched_buckets, layout_for, local_bucket
from timetravel.scenarios.dp_training.params import COLLECTIVE_LEVEL_RANKS_MIN, collective_level
from timetravel.sim import World
from timetravel.sim.runner import run_report

SCENARIO = get_scenario("dp_training")
TOLERANCE = 0.05


def run(settings: dict[str, Any], seed: int = 3) -> tuple[dict[str, Any], World]:
    return run_report(SCENARIO, SCENARIO.resolve_config(settings), seed)


def collective_spans(world: World) -> tuple[int, list[int]]:
    """The last collective: first entry to last completion, and each rank's own entry to completion."""
    ranks = [world.nodes[f"r{index}"] for index in range(world.config["ranks"])]
    first = min(rank["coll_entered_ns"] for rank in ranks)
    last = max(rank["coll_done_ns"] for rank in ranks)
    return last - first, [rank["coll_done_ns"] - rank["coll_entered_ns"] for rank in ranks]


@pytest.mark.parametrize("ranks", [8, 16, 64])
@pytest.mark.parametrize("algorithm", ["ring", "tree", "naive"])
def test_both_levels_give_the_same_weights_and_collective_times_within_5_percent(
    ranks: int, algorithm: str
) -> None:
    results = {}
    for level in ("message", "collective"):
        for steps in (1, 3):
            report, world = run(
                {"ranks": ranks, "steps": steps, "allreduce": algorithm, "fabric_level": level}
            )
            assert report["outcome"] == "pass"
            results[level, steps] = (report["summary"]["weights_hash"], collective_spans(world))
    for steps in (1, 3):
        message_hash, (message_span, message_ranks) = results["message", steps]
        collective_hash, (collective_span, collective_ranks) = results["collective", steps]
        assert collective_hash == message_hash
        assert abs(collective_span / message_span - 1) <= TOLERANCE
        for by_message, by_collective in zip(message_ranks, collective_ranks, strict=True):
            assert abs(by_collective / by_message - 1) <= TOLERANCE


def test_the_collective_level_costs_one_completion_event_per_rank_per_collective() -> None:
    message, _ = run({"ranks": 64, "steps": 3, "fabric_level": "message"})
    collective, _ = run({"ranks": 64, "steps": 3, "fabric_level": "collective"})
    assert message["events"] > 2 * 63 * 64 * 3
    assert collective["events"] < 8 * 64 * 3 + 64


def test_auto_picks_the_collective_level_for_large_jobs_only() -> None:
    def level(ranks: int, choice: str = "auto") -> bool:
        return collective_level(SCENARIO.resolve_config({"ranks": ranks, "fabric_level": choice}))

    assert not level(16)
    assert not level(COLLECTIVE_LEVEL_RANKS_MIN - 1)
    assert level(COLLECTIVE_LEVEL_RANKS_MIN)
    assert level(16, "collective")
    assert not level(COLLECTIVE_LEVEL_RANKS_MIN, "message")


def test_the_tree_arrival_sum_with_every_left_child_first_is_the_canonical_sum() -> None:
    contributions = np.random.Generator(np.random.PCG64(1)).random((13, 7)).astype(np.float32)
    canonical = tree.canonical_sum(contributions)
    assert tree.arrival_sum(contributions, [False] * 13).tobytes() == canonical.tobytes()


def test_the_tree_arrival_sum_adds_in_the_order_given() -> None:
    contributions = np.random.Generator(np.random.PCG64(2)).random((11, 5)).astype(np.float32)
    flipped = [index % 3 == 0 for index in range(11)]
    sums = [row.copy() for row in contributions]
    for node in range(10, -1, -1):
        children = [child for child in (2 * node + 1, 2 * node + 2) if child < 11]
        for child in reversed(children) if flipped[node] and len(children) == 2 else children:
            sums[node] = sums[node] + sums[child]
    assert tree.arrival_sum(contributions, flipped).tobytes() == sums[0].tobytes()


@pytest.mark.parametrize("ranks", [8, 16])
def test_in_arrival_order_both_levels_sum_alike_when_their_orders_agree(ranks: int) -> None:
    """Without network jitter the timing model orders each node's children as the messages do
    (at 64 ranks ECMP and contention can order some differently: then the bits follow the order)."""
    settings = {
        "ranks": ranks,
        "steps": 5,
        "allreduce": "tree",
        "reduce_order": "arrival",
        "network_jitter": 0,
    }
    message, _ = run({**settings, "fabric_level": "message"})
    collective, _ = run({**settings, "fabric_level": "collective"})
    canonical, _ = run({**settings, "fabric_level": "collective", "reduce_order": "canonical"})
    assert message["outcome"] == collective["outcome"] == "pass"
    assert collective["summary"]["weights_hash"] == message["summary"]["weights_hash"]
    assert collective["summary"]["weights_hash"] != canonical["summary"]["weights_hash"]


# -- faults keep their meaning ---------------------------------------------------------------------

BASE = {"ranks": 16, "steps": 20, "fabric_level": "collective", "oracle": True, "checkpoint_every": 5}


def faults(*records: dict[str, Any]) -> dict[str, Any]:
    return {**BASE, "faults": list(records)}


def test_a_crash_with_restart_is_survivable_at_the_collective_level() -> None:
    clean, clean_world = run(BASE)
    report, world = run(faults({"kind": "crash", "target": "r5", "t_start": "60ms", "t_end": "70ms"}))
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["restarts"] == 1
    assert report["summary"]["weights_hash"] == clean["summary"]["weights_hash"]
    assert world.t_ns > clean_world.t_ns


def test_a_partition_that_heals_delays_the_collective_and_one_that_never_heals_hangs_it() -> None:
    clean, clean_world = run(BASE)
    healed = {"kind": "partition", "target": "r4", "t_start": "50ms", "t_end": "58ms"}
    report, world = run(faults(healed))
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["weights_hash"] == clean["summary"]["weights_hash"]
    assert world.t_ns >= clean_world.t_ns + 1_000_000
    forever = {"kind": "partition", "target": "r4", "t_start": "50ms"}
    report, world = run(faults(forever))
    assert report["failure"]["kind"] == "hang"
    assert world.failures[-1]["flight_recorder"]


def test_a_drop_costs_the_retransmit_timeout_and_changes_no_bit() -> None:
    clean, clean_world = run(BASE)
    report, world = run(
        faults({"kind": "drop", "target": "r2", "t_start": "20ms", "t_end": "40ms", "params": {"count": 1}})
    )
    assert report["outcome"] == "pass", report["failure"]
    assert report["summary"]["weights_hash"] == clean["summary"]["weights_hash"]
    assert report["summary"]["faults"]["hit"] == 1
    assert world.t_ns >= clean_world.t_ns + BASE_RETRANSMIT_NS


BASE_RETRANSMIT_NS = 2_000_000


def test_an_in_flight_bit_flip_is_caught_by_the_checksum_or_lands_in_every_replica() -> None:
    clean, _ = run(BASE)
    flip = {"kind": "corrupt", "target": "r2", "t_start": "20ms", "t_end": "40ms", "params": {"count": 1}}
    caught, _ = run(faults(flip))
    assert caught["outcome"] == "pass"
    assert caught["summary"]["weights_hash"] == clean["summary"]["weights_hash"]
    landed, _ = run({**faults(flip), "checksums": False, "oracle": False})
    assert landed["outcome"] == "pass"
    assert landed["summary"]["weights_hash"] != clean["summary"]["weights_hash"]


def test_a_gradient_bit_flip_is_detectable_at_the_collective_level() -> None:
    # element and bit pinned: a drawn flip may land on a low mantissa bit of a zero, which no detector sees
    flip = {
        "kind": "corrupt",
        "target": "r3",
        "t_start": "30ms",
        "params": {"buffer": "grad", "element": 3, "bit": 30},
    }
    report, _ = run(faults(flip))
    assert report["failure"] is not None or report["summary"]["skipped_steps"] > 0


def test_a_straggler_slows_the_collective_for_everyone() -> None:
    _, clean_world = run(BASE)
    slow = {
        "kind": "slow",
        "target": "r7",
        "t_start": "0ms",
        "t_end": "500ms",
        "params": {"bandwidth_factor": 0.01, "compute_factor": 1.0},
    }
    report, world = run(faults(slow))
    assert report["outcome"] == "pass"
    assert world.t_ns > clean_world.t_ns


# -- replicas computed together --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("params", "dtype", "loss_scale"),
    [(2048, "float32", 1.0), (256, "bfloat16", 32768.0), (25, "float32", 3.0), (5000, "float32", 1.0)],
)
def test_batched_buckets_are_bit_identical_to_one_by_one(params: int, dtype: str, loss_scale: float) -> None:
    layout = layout_for(params)
    ranks = 37
    dataset = build_dataset(1, ranks, 8, 2, layout)
    storage = np.dtype(np.float32) if dtype == "float32" else np.dtype(ml_dtypes.bfloat16)
    noise = np.random.Generator(np.random.PCG64(5)).random((ranks, layout.params)) * 0.3
    weights = (dataset.initial_weights[None, :] + noise).astype(storage)
    inputs = np.stack([dataset.inputs[rank][1] for rank in range(ranks)])
    targets = np.stack([dataset.targets[rank][1] for rank in range(ranks)])
    alone = np.stack(
        [local_bucket(weights[r], inputs[r], targets[r], layout, storage, loss_scale) for r in range(ranks)]
    )
    together = batched_buckets(weights, inputs, targets, layout, storage, loss_scale)
    assert together.dtype == alone.dtype
    assert together.view(np.uint8).tobytes() == alone.view(np.uint8).tobytes()


def test_batched_buckets_in_small_groups_are_the_rows_of_one_group(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rank-last pass cuts the rows into groups (BATCH_TEMPORARY_ELEMENTS_MAX): a row's bits do not
    depend on the group it fell in, nor on its place in it."""
    layout = layout_for(256)
    ranks = 50
    dataset = build_dataset(2, ranks, 8, 1, layout)
    noise = np.random.Generator(np.random.PCG64(9)).standard_normal((ranks, layout.params))
    weights = (dataset.initial_weights[None, :] + noise).astype(np.float32)
    inputs = np.stack([dataset.inputs[rank][0] for rank in range(ranks)])
    targets = np.stack([dataset.targets[rank][0] for rank in range(ranks)])
    whole = batched_buckets(weights, inputs, targets, layout, np.dtype(np.float32))
    monkeypatch.setattr(model, "BATCH_TEMPORARY_ELEMENTS_MAX", 8 * layout.hidden * layout.inputs * 7)
    grouped = batched_buckets(weights, inputs, targets, layout, np.dtype(np.float32))
    reversed_rows = batched_buckets(weights[::-1], inputs[::-1], targets[::-1], layout, np.dtype(np.float32))
    assert grouped.tobytes() == whole.tobytes()
    assert reversed_rows[::-1].tobytes() == whole.tobytes()
    alone = local_bucket(weights[31], inputs[31], targets[31], layout, np.dtype(np.float32))
    assert whole[31].tobytes() == alone.tobytes()


@pytest.mark.parametrize("level", ["message", "collective"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_a_run_with_replicas_computed_together_is_the_run_computed_one_by_one(
    level: str, optimizer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Buckets in one batched pass and the update computed once for ranks with the same bytes."""
    settings = {
        "ranks": 16,
        "steps": 12,
        "fabric_level": level,
        "dtype": "bfloat16",
        "loss_scale": 1024.0,
        "optimizer": optimizer,
        "faults": [{"kind": "corrupt", "target": "r3", "t_start": "30ms", "params": {"buffer": "grad"}}],
    }
    replicas.clear()
    together, world_together = run(settings)
    monkeypatch.setattr(replicas, "BATCH_RANKS_MIN", 10**9)
    # the pipeline hands both the bucket's bytes it made once (the memos' key); update's own
    # functions compute without them
    monkeypatch.setattr(replicas, "inspect", lambda bucket, norm, _bytes=None: update.inspect(bucket, norm))
    monkeypatch.setattr(replicas, "apply", lambda *args, bucket_bytes=None: update.apply(*args[:5]))
    replicas.clear()
    alone, world_alone = run(settings)
    assert together["summary"] == alone["summary"]
    assert world_together.state_hash() == world_alone.state_hash()
    assert together["hash_chain"] == alone["hash_chain"]


def test_the_realistic_preset_runs_on_the_clock_of_the_modelled_job() -> None:
    report, world = run({"preset": "realistic", "steps": 3})
    assert report["outcome"] == "pass"
    assert world.config["ranks"] == 64
    step_ns = [value for _, _, value in world.metrics["step_time_ns"]]
    assert all(200_000_000 < value < 1_000_000_000 for value in step_ns)


@pytest.mark.slow
def test_a_1024_rank_ring_at_the_collective_level_keeps_the_oracle() -> None:
    report, _ = run({"preset": "ring1024", "steps": 2, "oracle": True})
    assert report["outcome"] == "pass", report["failure"]
