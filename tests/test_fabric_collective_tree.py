"""The tree all-reduce's timing computed for speed — by the compiled core (fabric/_speedups_tree.h,
what fabric/collective_timing.py ``tree_completions`` runs when it is built) and written out in Python
(``tree_completions_python``) — gives what the plain version gives (``tree_completions_reference``):
the same completion times, the same arrival order at every parent and the same links left busy, on
trees of every shape (a root alone, one child, odd and even counts, several hosts, leaves and
spines), with ranks entering at once, apart and in ties, and links already busy from earlier
traffic. Values the compiled core does not take (a float, a time past int64) go to Python."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from timetravel.fabric import collective_timing, speedups
from timetravel.scenarios import get_scenario


def _fabric(ranks: int) -> dict[str, Any]:
    scenario = get_scenario("dp_training")
    config = scenario.resolve_config({"ranks": ranks, "allreduce": "tree", "params": 64, "steps": 1})
    return scenario.build(config, 0).fabric


def _copy(fabric: dict[str, Any]) -> dict[str, Any]:
    return {**fabric, "link_busy_until_ns": list(fabric["link_busy_until_ns"])}


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 7, 16, 33, 130, 1000])
@pytest.mark.parametrize("entries_kind", ["together", "apart", "ties"])
def test_the_written_out_tree_matches_the_reference(ranks: int, entries_kind: str) -> None:
    fabric = _fabric(ranks)
    random = np.random.default_rng(ranks)
    busy = fabric["link_busy_until_ns"]
    for link in random.choice(len(busy), size=len(busy) // 3, replace=False).tolist():
        busy[link] = int(random.integers(0, 40_000))
    if entries_kind == "together":
        entries = np.full(ranks, 5_000, dtype=np.int64)
    elif entries_kind == "apart":
        entries = random.integers(0, 100_000, ranks).astype(np.int64)
    else:
        entries = random.integers(0, 3, ranks).astype(np.int64) * 1_000
    sizes = [4_096, 1_000, 17]
    reference_fabric = _copy(fabric)
    expected_times, expected_order = collective_timing.tree_completions_reference(
        reference_fabric, entries, sizes
    )
    for implementation in (collective_timing.tree_completions, collective_timing.tree_completions_python):
        fabric_under_test = _copy(fabric)
        times, order = implementation(fabric_under_test, entries, sizes)
        assert times.dtype == expected_times.dtype
        assert times.tolist() == expected_times.tolist()
        assert order == expected_order
        assert fabric_under_test["link_busy_until_ns"] == reference_fabric["link_busy_until_ns"]


def test_the_arrival_order_differs_between_parents_on_a_tree_with_ranks_apart() -> None:
    """Both orders occur, so the comparison above checks the tie-breaks and not a constant."""
    fabric = _fabric(130)
    entries = np.random.default_rng(7).integers(0, 100_000, 130).astype(np.int64)
    _, order = collective_timing.tree_completions(fabric, entries, [4_096])
    parents = order[0][: (130 - 2) // 2 + 1]
    assert any(parents) and not all(parents)


@pytest.mark.skipif(speedups.compiled is None, reason="fabric's compiled code is not built")
def test_the_compiled_tree_runs_and_hands_what_it_cannot_take_to_python() -> None:
    fabric = _fabric(40)
    entries = np.arange(40, dtype=np.int64) * 100
    assert speedups.compiled is not None
    arguments = [fabric["link_latency_ns"], fabric["link_bytes_per_s"], 0, entries.tolist(), [512]]
    busy = list(fabric["link_busy_until_ns"])
    assert speedups.compiled.tree_times(fabric["route"], busy, *arguments) is not None
    assert busy != fabric["link_busy_until_ns"]
    untouched = list(fabric["link_busy_until_ns"])
    untouched[3] = 2**62
    before = list(untouched)
    assert speedups.compiled.tree_times(fabric["route"], untouched, *arguments) is None
    assert untouched == before
    slow = _copy(fabric)
    slow["link_bytes_per_s"] = [float(rate) for rate in fabric["link_bytes_per_s"]]
    reference = _copy(slow)
    times, order = collective_timing.tree_completions(slow, entries, [512])
    expected_times, expected_order = collective_timing.tree_completions_reference(reference, entries, [512])
    assert times.tolist() == expected_times.tolist() and order == expected_order
    assert slow["link_busy_until_ns"] == reference["link_busy_until_ns"]
