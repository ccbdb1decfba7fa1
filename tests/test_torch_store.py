"""The rendezvous store is a node of the World: ranks see each other's keys (issue 13's gap)."""

from __future__ import annotations

from pathlib import Path

from torch_launch import simulate_world as simulate_script

from timetravel.sim.world import World

SCRIPT = Path(__file__).resolve().parent / "torch_scripts" / "store_exchange.py"


def simulate_world(seed: int, *settings: str) -> tuple[dict, World]:
    return simulate_script(SCRIPT, 3, seed, *settings)


def test_ranks_exchange_keys_through_the_default_store_in_a_seeded_order() -> None:
    first, world = simulate_world(0)
    assert first["outcome"] == "pass", first["failure"]
    keys = world.nodes["store"]["keys"]
    assert {key.rpartition("/")[2]: value for key, value in keys.items() if "address/" in key} == {
        "0": b"host0",
        "1": b"host1",
        "2": b"host2",
    }
    assert keys[next(key for key in keys if key.endswith("/arrived"))] == b"3"
    again, _ = simulate_world(0)
    assert again["hash_chain"] == first["hash_chain"]
    other, _ = simulate_world(1)
    assert other["outcome"] == "pass", other["failure"]


def test_a_wait_for_a_key_nobody_sets_raises_torch_s_error_after_its_timeout() -> None:
    report, world = simulate_world(0, "args=timeout")
    failure = report["failure"]
    assert failure["kind"] == "exception" and failure["node"] == "r1"
    assert "DistStoreError: Wait timeout for keys" in failure["message"] and "never_set" in failure["message"]
    assert failure["t_ns"] >= 2_000_000_000  # the script's timeout, in logical time
    assert world.nodes["store"]["waiting"] == []


def test_a_get_of_a_key_nobody_sets_waits_the_default_store_timeout() -> None:
    # init_process_group sets the rendezvous store's timeout to the group's: gloo's default, 30 minutes
    report, _ = simulate_world(0, "args=get_missing")
    failure = report["failure"]
    assert failure["node"] == "r1" and "DistStoreError: Wait timeout" in failure["message"]
    assert 1_800_000_000_000 <= failure["t_ns"] < 1_801_000_000_000
