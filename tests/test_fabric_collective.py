"""The collective-level fabric's timing (issue 18): the closed form is the recurrence, and a ring on
a uniform fabric takes the textbook 2(N-1) steps of latency plus a chunk each."""

from __future__ import annotations

import numpy as np
import pytest

from timetravel.fabric import collective_timing
from timetravel.scenarios import get_scenario


@pytest.mark.parametrize("ranks", [2, 3, 5, 16, 64, 300])
def test_the_ring_closed_form_equals_the_recurrence(ranks: int) -> None:
    generator = np.random.default_rng(ranks)
    for trial in range(10):
        entries = generator.integers(0, 10**6, ranks) if trial else np.full(ranks, 7, dtype=np.int64)
        delays = generator.integers(0, 10**4, ranks)
        closed = collective_timing._ring_closed_form(entries, delays)
        stepped = collective_timing._ring_recurrence(entries, delays, np.zeros(ranks, dtype=np.int64))
        assert closed.tolist() == stepped.tolist()


def test_a_chunk_queues_behind_the_previous_one_on_a_slow_edge() -> None:
    entries = np.array([0, 0, 0, 1000], dtype=np.int64)
    delays = np.array([10, 10, 10, 10], dtype=np.int64)
    free = collective_timing._ring_recurrence(entries, delays, np.zeros(4, dtype=np.int64))
    queued = collective_timing._ring_recurrence(entries, delays, np.array([0, 0, 0, 500], dtype=np.int64))
    assert (queued >= free).all()
    assert queued.max() > free.max()


def fabric_of(ranks: int, **settings: object) -> dict:
    scenario = get_scenario("dp_training")
    config = scenario.resolve_config({"ranks": ranks, "network_jitter": 0, **settings})
    return scenario.build(config, 0).fabric


def test_a_ring_on_one_host_takes_2_n_minus_1_hops() -> None:
    ranks = 8
    fabric = fabric_of(ranks)
    chunk = 1024
    hop = collective_timing.edge_delay_ns(fabric, collective_timing.path_links(fabric, 0, 1), chunk)
    done = collective_timing.ring_completions(fabric, np.zeros(ranks, dtype=np.int64), chunk)
    assert done.tolist() == [2 * (ranks - 1) * hop] * ranks


def test_buckets_run_back_to_back_and_leave_their_links_busy() -> None:
    fabric = fabric_of(16)
    entries = np.zeros(16, dtype=np.int64)
    one = collective_timing.ring_completions(fabric_of(16), entries, 4096, buckets=1)
    three = collective_timing.ring_completions(fabric, entries, 4096, buckets=3)
    assert (three > 2 * one).all()
    assert max(fabric["link_busy_until_ns"]) == int(three.max())


def test_the_tree_reports_which_child_was_heard_first() -> None:
    fabric = fabric_of(7)
    entries = np.array([0, 0, 0, 0, 0, 0, 50_000], dtype=np.int64)
    done, right_first = collective_timing.tree_completions(fabric, entries, [2048])
    assert right_first[0][2] is False  # r2's right child r6 entered late
    assert (done >= 50_000).all()
    late_left = np.array([0, 0, 0, 0, 0, 50_000, 0], dtype=np.int64)
    _, right_first = collective_timing.tree_completions(fabric_of(7), late_left, [2048])
    assert right_first[0][2] is True
