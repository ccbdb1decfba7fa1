"""The tui bench suite runs and reports every figure (timing is its job, not this test's)."""

from __future__ import annotations

import pytest

from timetravel.tui.bench import FRAME_BUDGET_MS, run_bench


@pytest.mark.slow
def test_bench_tui_quick_reports_every_widget() -> None:
    result = run_bench(quick=True)
    figures = result["figures"]
    assert result["bench"] == "tui"
    for key in (
        "rank_grid_render_ms",
        "timeline_render_ms",
        "event_log_seek_and_draw_ms",
        "inspector_reroot_ms",
    ):
        assert figures[key] > 0
    assert figures["frame_max_ms"] == max(
        figures[key]
        for key in figures
        if key.endswith("_ms") and key not in ("frame_max_ms", "frame_budget_ms")
    )
    assert figures["frame_budget_ms"] == FRAME_BUDGET_MS
