"""bench/timing.py: the two measuring loops the benchmarks' ratios rest on."""

from __future__ import annotations

from timetravel.bench.timing import alternating_best, best_of


def test_alternating_best_interleaves_after_an_unmeasured_round() -> None:
    calls: list[str] = []
    plain, recorded = alternating_best(lambda: calls.append("plain"), lambda: calls.append("recorded"), 3)
    assert calls == ["plain", "recorded"] * 4  # the warm-up round, then three measured ones
    assert 0 <= plain < 1 and 0 <= recorded < 1


def test_best_of_returns_the_last_result() -> None:
    counter = iter(range(10))
    took, result = best_of(lambda: next(counter), 4)
    assert result == 3 and took >= 0
