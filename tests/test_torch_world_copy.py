"""A World copy kept beside a rank checkpoint (timetravel/torch/world/world_copy.py): a seek restores from it
instead of decoding the snapshot, so it must be the same World and share nothing mutable with it."""

from __future__ import annotations

import numpy as np

from timetravel.sim.context import freeze
from timetravel.sim.world import World
from timetravel.torch.world.world_copy import copy_world, immutable, world_bytes


def a_world() -> World:
    world = World("torch", {"nproc": 2, "args": "--steps 3"}, 5)
    rank = world.add_node("r0", "rank", {"status": "waiting", "delivered": 3})
    rank["params"] = {
        "weight": np.frombuffer(np.arange(6, dtype=np.float32).tobytes(), dtype=np.float32).reshape(2, 3),
        "bias": np.zeros(3, dtype=np.float32),  # writeable: must be copied
    }
    rank["history"] = [[1, 0.5], [2, 0.25]]
    world.schedule(10, "r0", "poll", {"delivery": 4, "tensor": freeze(np.ones(4))})
    world.metrics["loss"] = [[1, 2.0]]
    return world


def test_a_copy_has_the_same_state_hash() -> None:
    world = a_world()
    assert copy_world(world).state_hash() == world.state_hash()


def test_a_copy_shares_no_mutable_state() -> None:
    world = a_world()
    before = world.state_hash()
    copied = copy_world(world)
    copied.nodes["r0"]["params"]["bias"][0] = 7.0
    copied.nodes["r0"]["history"].append([3, 0.125])
    copied.nodes["r0"]["delivered"] = 4
    copied.metrics["loss"][0][1] = 9.0
    assert world.state_hash() == before
    assert world.nodes["r0"]["params"]["bias"][0] == 0.0


def test_immutable_arrays_are_shared_and_the_rest_copied() -> None:
    world = a_world()
    copied = copy_world(world)
    assert copied.nodes["r0"]["params"]["weight"] is world.nodes["r0"]["params"]["weight"]
    assert copied.nodes["r0"]["params"]["bias"] is not world.nodes["r0"]["params"]["bias"]
    assert copied.queue[0].payload["tensor"] is world.queue[0].payload["tensor"]
    view_of_writeable = np.zeros(4)[1:]
    view_of_writeable.flags.writeable = False
    assert not immutable(view_of_writeable)  # its base can still change it
    assert world_bytes(world) == 6 * 4 + 3 * 4 + 4 * 8


def test_a_kept_copy_stores_equal_immutable_arrays_once() -> None:
    world = World("torch", {}, 0)
    replica = np.arange(32 * 1024, dtype=np.float32)  # 128 KiB: above the deduplication floor
    for rank in range(3):
        world.add_node(f"r{rank}", "rank", {"params": {"w": np.frombuffer(replica.tobytes(), np.float32)}})
    world.nodes["r2"]["params"]["w"] = np.frombuffer((replica + 1).tobytes(), np.float32)  # differs
    kept = copy_world(world, deduplicate=True)
    arrays = [kept.nodes[f"r{rank}"]["params"]["w"] for rank in range(3)]
    assert arrays[0] is arrays[1] and arrays[2] is not arrays[0]
    assert kept.state_hash() == world.state_hash()
    assert world_bytes(kept) == 2 * replica.nbytes < world_bytes(world)
