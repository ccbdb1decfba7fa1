"""``timetravel bench tui``: how long the widgets take to draw at scale (the 100 ms frame budget).

A frame the user waits on is a widget drawing after the cursor moved. Each figure is the best of
a few repeats of one widget drawing in a headless App at 160x48: the rank grid over 10,000 ranks
(one of them NaN, one crashed) after the cursor moved, the timeline over 200,000 loss points and
2,000 snapshot marks, the event log scrolled into a source of 10,000,000 events, the state
inspector re-rooted on a world of 10,000 ranks with one rank opened. ``frame_max_ms`` is the
largest of them and must stay under ``FRAME_BUDGET_MS``. Seeks and branch runs are not frames:
they run in workers (see docs/tui.md).

The App itself is measured at work too (:mod:`timetravel.tui.bench_app`): the event loop's
longest stall while it scrubs a recording, which is the longest frame a user could wait for.

Wall-clock time is read here, in a benchmark, never in the simulation path.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import numpy as np
from textual.app import App, ComposeResult

from timetravel.tui.model import EventRow, RankCell, TimelineData, TimeMark
from timetravel.tui.widgets import EventLog, RankGrid, StateInspector, Timeline

FRAME_BUDGET_MS = 100.0
REPEATS = 5
MS = 1_000_000
SCREEN = (160, 48)


class CountingSource:
    """``events`` synthetic events made on demand (event i at i microseconds)."""

    def __init__(self, events: int) -> None:
        self.events = events

    def __len__(self) -> int:
        return self.events

    def row(self, index: int) -> EventRow:
        return EventRow(index, index * 1000, f"rank{index % 1024}", "tick", "")

    def index_at_time(self, t_ns: int) -> int:
        return min(self.events - 1, t_ns // 1000)

    def index_of_number(self, number: int) -> int:
        return number if number < self.events else -1

    def filtered(self, node: str | None = None, kind: str | None = None) -> CountingSource:
        return self

    def node_names(self) -> list[str]:
        return [f"rank{index}" for index in range(1024)]

    def kind_names(self) -> list[str]:
        return ["tick"]


def _cells(ranks: int) -> tuple[RankCell, ...]:
    cells = [
        RankCell(f"rank{index}", step=97, collective_seq=388, last_progress_ns=995 * MS)
        for index in range(ranks)
    ]
    cells[ranks // 3] = replace(cells[ranks // 3], state="nan")
    cells[2 * ranks // 3] = replace(cells[2 * ranks // 3], state="crashed", step=90)
    return tuple(cells)


def _best_ms(action: Callable[[], Any]) -> float:
    best = float("inf")
    for _ in range(REPEATS):
        start = time.perf_counter()
        action()
        best = min(best, (time.perf_counter() - start) * 1000)
    return round(best, 2)


class _Bench(App[None]):
    def __init__(self, widgets: list[Any]) -> None:
        super().__init__()
        self.widgets = widgets

    def compose(self) -> ComposeResult:
        yield from self.widgets


async def _measure(ranks: int, points: int, events: int) -> dict[str, float]:
    timeline = Timeline(
        TimelineData(
            0,
            points * MS,
            marks=tuple(TimeMark(index * (points // 2000 or 1) * MS, "snapshot") for index in range(2000)),
            loss=tuple((index * MS, 1.0 / (1 + index)) for index in range(points)),
        )
    )
    grid = RankGrid(_cells(ranks), 1000 * MS)
    log = EventLog(CountingSource(events))
    document = {
        "nodes": {
            f"rank{index}": {"step": index, "weights": np.zeros(1024, np.float32)} for index in range(ranks)
        }
    }
    inspector = StateInspector(document)
    app = _Bench([timeline, grid, log, inspector])
    figures: dict[str, float] = {}
    async with app.run_test(size=SCREEN) as pilot:
        await pilot.pause()
        inspector.show_path(f"nodes/rank{ranks - 1}/weights")
        moves = iter(range(1, 10_000))

        def move_grid() -> None:
            grid.now_ns = 1000 * MS + next(moves)
            grid.render()

        def scroll_log() -> None:
            log.cursor_ns = (events - next(moves)) * 1000
            for line in range(log.scrollable_content_region.height):
                log.render_line(line)

        def reroot() -> None:
            inspector.document = dict(document)

        figures["rank_grid_render_ms"] = _best_ms(move_grid)
        figures["timeline_render_ms"] = _best_ms(timeline.render)
        figures["event_log_seek_and_draw_ms"] = _best_ms(scroll_log)
        figures["inspector_reroot_ms"] = _best_ms(reroot)
    return figures


FRAME_FIGURES = (
    "rank_grid_render_ms",
    "timeline_render_ms",
    "event_log_seek_and_draw_ms",
    "inspector_reroot_ms",
    "app_loop_lag_max_ms",
    "app_show_view_max_ms",
)
"""The figures that are frames (the UI thread held); ``frame_max_ms`` is the largest of them."""


def run_bench(quick: bool = False) -> dict[str, Any]:
    """Draw each widget at scale (``quick``: 1,024 ranks, 20,000 points, 1,000,000 events), then
    scrub the whole App over a recording (:mod:`timetravel.tui.bench_app`)."""
    from timetravel.tui.bench_app import measure_app

    ranks, points, events = (1_024, 20_000, 1_000_000) if quick else (10_000, 200_000, 10_000_000)
    figures: dict[str, Any] = {"ranks": ranks, "loss_points": points, "events": events}
    figures.update(asyncio.run(_measure(ranks, points, events)))
    figures.update(measure_app(quick))
    figures["frame_max_ms"] = max(figures[key] for key in FRAME_FIGURES)
    figures["frame_budget_ms"] = FRAME_BUDGET_MS
    return {"bench": "tui", "figures": figures}
