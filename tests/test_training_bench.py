"""``timetravel bench training`` (issue 18): the figures a user reads exist and mean what they say."""

from __future__ import annotations

import pytest

from timetravel.bench import get_suite, suite_names


def test_the_training_suite_is_registered() -> None:
    assert "training" in suite_names()


@pytest.mark.slow
def test_the_quick_training_bench_reports_every_workload() -> None:
    result = get_suite("training")(quick=True)
    figures = result["figures"]
    assert result["bench"] == "training"
    for name in ("ring_16", "ring_128", "tree_1000", "realistic"):
        assert figures[f"{name}_step_wall_s"] > 0
        assert figures[f"{name}_peak_rss_gib"] > 0
    assert figures["ring_128_fabric_level"] == "message"
    assert figures["tree_1000_fabric_level"] == "collective"
    assert figures["realistic_fabric_level"] == "collective"
    assert figures["realistic_sim_per_wall"] > 1.0
    assert figures["peak_rss_gib"] < 16
    assert figures["seek_1000_p95_ms"] >= figures["seek_1000_p50_ms"] > 0  # a recorded tree run, sought
    assert figures["seek_1000_snapshots"] >= 2
    # the CPU split of the seeks: in milliseconds like the wall times (the slowest seeks' CPU shows,
    # in one part or the other: the kernel splits CPU time by ticks), and never more than a seek took
    user_ms, system_ms = figures["seek_1000_p95_user_ms"], figures["seek_1000_p95_system_ms"]
    assert user_ms >= 0 and system_ms >= 0 and user_ms + system_ms > 0
    assert max(user_ms, system_ms) <= figures["seek_1000_max_ms"] * 1.1 + 5
    assert isinstance(figures["seek_1000_page_faults"], int)
