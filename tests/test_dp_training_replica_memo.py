"""The replicas' memo key (dp_training/replicas.py): the weights' bytes, whatever their dtype (a
memoryview of float16 or bfloat16 weights is refused by the buffer protocol: the array is hashed)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import xxhash

from timetravel.scenarios import get_scenario
from timetravel.scenarios.dp_training import replicas
from timetravel.scenarios.dp_training.numerics import DTYPES
from timetravel.sim import Simulation


def _tree_states(ranks: int) -> tuple[list[str], list[dict[str, Any]]]:
    """The rank names and states of a fresh ``ranks``-rank tree world (seed 0)."""
    scenario = get_scenario("dp_training")
    world = scenario.build(scenario.resolve_config({"ranks": ranks, "allreduce": "tree"}), 0)
    names = [f"r{index}" for index in range(ranks)]
    return names, [world.nodes[name] for name in names]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_weights_key_is_the_hash_of_the_weights_bytes(dtype: str) -> None:
    weights = np.linspace(-1.0, 1.0, 257).astype(DTYPES[dtype] if dtype == "bfloat16" else dtype)
    expected = xxhash.xxh3_128_digest(weights.tobytes())
    assert replicas._weights_key(weights) == expected
    assert replicas._weights_key(weights[::2]) == xxhash.xxh3_128_digest(weights[::2].tobytes())


def test_weights_key_tells_one_flipped_bit() -> None:
    weights = np.ones(64, dtype=np.float16)
    flipped = weights.copy()
    flipped.view(np.uint16)[5] ^= 1
    assert replicas._weights_key(weights) != replicas._weights_key(flipped)


def test_stacked_batches_are_the_peers_batches_for_the_key_they_were_stacked_for() -> None:
    names, states = _tree_states(8)
    replicas.clear()
    stacks = set()
    for batch in (0, 1, 0, 3):
        inputs, targets = replicas._stacked_batches(("config",), names, states, batch)
        assert np.array_equal(inputs, np.stack([state["inputs"][batch] for state in states]))
        assert np.array_equal(targets, np.stack([state["targets"][batch] for state in states]))
        assert not inputs.flags.writeable and not targets.flags.writeable
        stacks.add(id(inputs.base))
    assert len(stacks) == 1  # one stack of the whole shards serves every batch
    fewer, _ = replicas._stacked_batches(("config",), names[:3], states[:3], 0)
    assert np.array_equal(fewer, np.stack([state["inputs"][0] for state in states[:3]]))
    replicas.clear()


def test_stacked_batches_are_stacked_afresh_when_a_shard_changed_in_place() -> None:
    names, states = _tree_states(4)
    replicas.clear()
    before, _ = replicas._stacked_batches(("config",), names, states, 0)
    states[2]["inputs"][0, 0, 0] += np.float32(0.25)
    after, _ = replicas._stacked_batches(("config",), names, states, 0)
    assert after.base is not before.base and after[2, 0, 0] == states[2]["inputs"][0, 0, 0]
    replicas.clear()


def test_no_two_ranks_ever_hold_one_buckets_memory() -> None:
    """A batched row is handed to its rank as a view of the batch, not a copy: the rows must be
    disjoint, so that a bit flipped into one rank's bucket reaches no other rank."""
    scenario = get_scenario("dp_training")
    config = scenario.resolve_config(
        {"ranks": 8, "allreduce": "tree", "steps": 2, "fabric_level": "collective"}
    )
    world = scenario.build(config, 0)
    simulation = Simulation(scenario, world)
    replicas.clear()
    shared_rows_seen = 0
    while world.queue and not world.failures:
        simulation.run(max_events=1)
        buckets = [state["bucket"] for state in world.nodes.values() if state.get("bucket") is not None]
        shared_rows_seen += sum(bucket.base is not None for bucket in buckets)
        for index, bucket in enumerate(buckets):
            assert bucket.flags.writeable
            assert not any(np.shares_memory(bucket, other) for other in buckets[index + 1 :])
    assert world.failures == []
    assert shared_rows_seen > 0  # the batched rows were there to be checked
