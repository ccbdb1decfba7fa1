"""The tui bench suite runs and reports every figure (timing is its job, not this test's)."""

from __future__ import annotations

import pytest

from timetravel.tui.bench import FRAME_BUDGET_MS, FRAME_FIGURES, run_bench


@pytest.mark.slow
def test_bench_tui_quick_reports_every_widget() -> None:
    result = run_bench(quick=True)
    figures = result["figures"]
    assert result["bench"] == "tui"
    assert len(FRAME_FIGURES) == 6  # the four widgets' draws, the App's loop lag and its view update
    for key in (*FRAME_FIGURES, "app_seek_p50_ms", "app_seek_max_ms"):
        assert figures[key] > 0
    assert figures["app_seek_p50_ms"] <= figures["app_seek_max_ms"]
    assert figures["app_loop_lag_max_ms"] <= figures["app_loop_lag_worst_run_ms"]
    assert figures["app_recording_events"] > 0
    assert figures["frame_max_ms"] == max(figures[key] for key in FRAME_FIGURES)
    assert figures["frame_budget_ms"] == FRAME_BUDGET_MS
