"""StreamsView: kernels as bars in their columns, the race drawn, what each stream does at the cursor."""

from __future__ import annotations

from tests.tui import sample
from tests.tui.harness import Harness, drive, widget_lines
from timetravel.tui.widgets.streams import LABEL_COLUMNS, StreamsView, activity_at

US = sample.US


def run(scenario, races=(sample.RACE,), size=(80, 16), cursor_ns=1700 * US) -> None:
    view = StreamsView(sample.kernel_spans(), races, cursor_ns=cursor_ns)
    app = Harness(view)

    async def wrapped(pilot) -> None:
        view.focus()
        await pilot.pause()
        await scenario(pilot, app, view)

    drive(app, wrapped, size)


def test_racing_rank_comes_first_and_its_kernels_sit_at_their_times() -> None:
    async def scenario(pilot, app, view: StreamsView) -> None:
        assert view.rows[:2] == [("rank2", "compute"), ("rank2", "comm")]
        lines = widget_lines(view)
        compute = lines[1][LABEL_COLUMNS:]
        assert lines[1].startswith("r2 compute")
        start = view.column_of(1000 * US)  # the second fwd_bwd starts at 1 ms
        assert compute[start : start + 7] == "fwd_bwd"

    run(scenario)


def test_the_missing_ordering_edge_is_drawn_between_the_two_kernels_and_named() -> None:
    async def scenario(pilot, app, view: StreamsView) -> None:
        lines = widget_lines(view)
        # the race's kernels: allreduce [1620, 1900) us on comm, optim from 1700 us on compute
        column = view.column_of(1700 * US)
        assert lines[1][LABEL_COLUMNS + column] == "╳"
        assert lines[2][LABEL_COLUMNS + column] == "╳"
        race_lines = [line for line in lines if line.startswith("╳ race")]
        assert race_lines == ["╳ race on rank2: grad — comm:allreduce and compute:optim, no ordering edge"]

    run(scenario)


def test_without_races_no_edge_is_drawn() -> None:
    async def scenario(pilot, app, view: StreamsView) -> None:
        text = "\n".join(widget_lines(view))
        assert "╳" not in text
        assert view.rows[0] == ("rank0", "compute")

    run(scenario, races=())


def test_the_detail_line_says_what_each_stream_does_at_the_cursor() -> None:
    spans = sample.kernel_spans()
    assert activity_at(spans, "rank0", "compute", 700 * US) == "compute: idle, optim in 210us"
    assert activity_at(spans, "rank0", "comm", 700 * US) == "comm: allreduce (80us in)"
    assert activity_at(spans, "rank0", "comm", 2950 * US) == "comm: idle 50us since allreduce"

    async def scenario(pilot, app, view: StreamsView) -> None:
        view.focus_ranks = ("rank0",)
        await pilot.pause()
        assert view.rows == [("rank0", "compute"), ("rank0", "comm")]
        last = widget_lines(view)[-1]
        assert last == "rank0 at cursor: compute: idle, optim in 210us · comm: allreduce (80us in)"

    run(scenario, races=(), cursor_ns=700 * US)


def test_zoom_changes_the_window() -> None:
    async def scenario(pilot, app, view: StreamsView) -> None:
        half = view.half_window_ns
        await pilot.press("plus")
        assert view.half_window_ns == half // 2
        await pilot.press("minus", "minus")
        assert view.half_window_ns == half * 2

    run(scenario)
