"""RankGrid: outliers first in every mode, 1024 ranks folded into buckets, selection posts the rank."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

from tests.tui import sample
from tests.tui.harness import Harness, drive, widget_lines
from timetravel.tui.rank_layout import RankColumns, layout
from timetravel.tui.widgets.rank_grid import RankGrid

MS = sample.MS
NOW_NS = 1000 * MS


def run(scenario, cells=None, size=(40, 12)) -> None:
    grid = RankGrid(cells if cells is not None else sample.rank_cells(), NOW_NS)
    app = Harness(grid)

    async def wrapped(pilot) -> None:
        grid.focus()
        await pilot.pause()
        await scenario(pilot, app, grid)

    drive(app, wrapped, size)


def names(grid: RankGrid) -> list[str]:
    return [item.names[0] for item in grid.items]


def test_state_mode_puts_the_nan_rank_first_then_the_slow_one_then_rank_order() -> None:
    async def scenario(pilot, app, grid: RankGrid) -> None:
        assert names(grid) == ["rank5", "rank9"] + [f"rank{i}" for i in range(16) if i not in (5, 9)]
        lines = widget_lines(grid)
        assert lines[0].split()[:3] == ["5!", "9◐", "0●"]
        assert grid.detail_lines == 2  # 36 columns: the detail wraps at " · "
        assert " · ".join(lines[-3:-1]) == "rank5 nan · step 97 · coll #388 · progress 5ms ago"
        assert lines[-1] == "16 ranks: 1 nan, 1 slow, 14 healthy"

    run(scenario)


def test_each_mode_ranks_by_its_own_distance_from_the_crowd() -> None:
    async def scenario(pilot, app, grid: RankGrid) -> None:
        await pilot.press("m")
        assert grid.mode == "behind"
        assert names(grid)[0] == "rank9" and grid.items[0].value == "2"
        assert {item.value for item in grid.items[1:]} == {"·"}
        assert widget_lines(grid)[-1] == "leader at step 97, 1 behind (max 2)"
        await pilot.press("m")
        assert grid.mode == "seq"
        assert names(grid)[0] == "rank9" and grid.items[0].value == "-1"
        assert widget_lines(grid)[-1] == "collective #388 on 15, 1 elsewhere"
        await pilot.press("m")
        assert grid.mode == "progress"
        assert names(grid)[0] == "rank9" and grid.items[0].value == "50ms"
        assert " · ".join(widget_lines(grid)[-3:-1]).startswith("rank9 slow · waiting on rank8 · step 95")
        await pilot.press("m")
        assert grid.mode == "state"

    run(scenario)


def test_enter_and_click_open_the_selected_rank() -> None:
    async def scenario(pilot, app, grid: RankGrid) -> None:
        await pilot.press("right", "enter")
        assert [message.name for message in app.posted(RankGrid.RankSelected)] == ["rank9"]
        # third cell of the first row: 1 column of border + 1 of padding, then cells of width 3
        await pilot.click(RankGrid, offset=(2 + 2 * grid.cell_width, 1))
        assert grid.selected == 2
        assert app.posted(RankGrid.RankSelected)[-1].name == "rank0"

    run(scenario)


def cluster(count: int) -> tuple:
    cells = list(sample.rank_cells(count))
    cells[700] = replace(cells[700], state="crashed")
    return tuple(cells)


def test_1024_ranks_fold_into_buckets_that_cover_every_rank_exactly_once() -> None:
    async def scenario(pilot, app, grid: RankGrid) -> None:
        items = grid.items
        assert len(grid.cells) == 1024
        assert len(items) <= grid.capacity < 1024
        covered = Counter(name for item in items for name in item.names)
        assert set(covered) == {cell.name for cell in grid.cells}
        assert max(covered.values()) == 1
        assert [item.names for item in items[:3]] == [("rank5",), ("rank700",), ("rank9",)]
        assert all(item.is_bucket for item in items[3:])
        assert "1024 ranks: 1 nan, 1 crashed, 1 slow, 1021 healthy" in widget_lines(grid)[-1]

    run(scenario, cluster(1024), size=(40, 14))


def test_enter_on_a_bucket_zooms_into_its_ranks_and_backspace_zooms_out() -> None:
    async def scenario(pilot, app, grid: RankGrid) -> None:
        bucket = grid.items[3]
        await pilot.press("right", "right", "right", "enter")
        assert grid.zoom == bucket.names
        assert [cell.name for cell in grid.visible_cells] == list(bucket.names)
        assert "of 1024" in str(grid.border_title)
        assert app.posted(RankGrid.RankSelected) == []
        await pilot.press("backspace")
        assert grid.zoom == ()

    run(scenario, cluster(1024), size=(40, 14))


def test_a_bucket_shows_its_worst_member() -> None:
    cells = cluster(1024)
    items = layout(RankColumns(cells), "state", NOW_NS, capacity=8)
    # capacity 8: the 3 outliers fit in the first half (4), the rest fold into 5 buckets
    assert [item.names[0] for item in items[:3]] == ["rank5", "rank700", "rank9"]
    assert len(items) == 8
    everything = layout(RankColumns(cells), "state", NOW_NS, capacity=4)
    assert [item.names for item in everything[:2]] == [("rank5",), ("rank700",)]
    worst = [item for item in everything[2:] if "rank9" in item.names]
    assert worst[0].state == "slow" and worst[0].value == "◐"


def test_at_a_torch_hang_the_selected_rank_says_whom_it_waits_on() -> None:
    from tests.tui.test_feed import TORCH_VIEW, torch_hang_world
    from timetravel.tui.feed import rank_cells_from_world

    async def scenario(pilot, app, grid: RankGrid) -> None:
        text = " · ".join(widget_lines(grid))
        assert names(grid)[0] == "r1" and "⊘" in text  # the rank the others wait for comes first, hung
        assert "r1 hung" in text and "1 hung, 2 healthy" in text
        await pilot.press("right")
        text = " · ".join(widget_lines(grid))
        assert "r0" in text and "waiting on r1" in text and "step 2" in text and "coll #9" in text
        await pilot.press("m", "m")
        assert grid.mode == "seq" and names(grid)[0] == "r1"  # the rank behind is the odd one out

    run(scenario, cells=rank_cells_from_world(torch_hang_world(), TORCH_VIEW), size=(60, 12))
