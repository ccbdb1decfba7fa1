"""``timetravel bench torch`` (issues 13 and 14): the figures a user reads exist and mean what they say."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

REWIND_FIGURES = (
    "record_overhead_ratio",
    "seek_p50_ms",
    "seek_p95_ms",
    "seek_cold_ms",
    "checkpoint_uss_bytes_per_rank",
    "branch_wall_s",
    "record_bytes",
)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_bench_torch_quick_reports_the_rewind_figures(quick_bench: Callable[[str], dict[str, Any]]) -> None:
    figures = quick_bench("torch")
    assert figures["run_ratio_vs_gloo"] > 0  # the suite's first figures are still there
    # real gloo's per-call cost is timed inside its loop: subtracting whole commands gave 0.0
    assert figures["gloo_collective_us"] > 0
    for figure in REWIND_FIGURES:
        assert figures[figure] > 0, figure
    assert figures["checkpoints_live"] >= 1  # the rebuilds (the ranks re-executed) kept checkpoints
    assert figures["seek_p95_ms"] >= figures["seek_p50_ms"]
    wide = [name for name in figures if name.startswith("seek_p95_ms_interval_")]
    assert len(wide) == 1 and figures[wide[0]] > 0  # the same seeks at twice the snapshot interval
    assert "tiny_gpt.py" in figures["rewind_workload"]
