"""Timeline: marks where they happened, scrubbing by keys and mouse, zoom, loss and likelihood rows."""

from __future__ import annotations

from textual.pilot import Pilot

from tests.tui import sample
from tests.tui.harness import Harness, drive, widget_lines
from timetravel.tui.charts import nice_step
from timetravel.tui.model import TimelineData
from timetravel.tui.widgets.timeline import GUTTER_COLUMNS, Timeline

MS = sample.MS
MARKS_ROW, LOSS_ROW, LIKELIHOOD_ROW = 0, 3, 4


def run(scenario, data: TimelineData | None = None, size=(80, 10)) -> None:
    timeline = Timeline(data or sample.timeline_data())
    app = Harness(timeline)

    async def wrapped(pilot: Pilot) -> None:
        timeline.focus()
        await pilot.pause()
        await scenario(pilot, app, timeline)

    drive(app, wrapped, size)


def test_marks_fall_in_the_column_of_their_time_and_failure_wins_its_column() -> None:
    async def scenario(pilot, app, timeline: Timeline) -> None:
        # content width = 80 - 2 (padding) = 78; less the gutter
        assert timeline.columns == 78 - GUTTER_COLUMNS
        row = widget_lines(timeline)[MARKS_ROW][GUTTER_COLUMNS:]
        span = sample.END_NS
        for t_ns, glyph in ((sample.FAILURE_NS, "✖"), (sample.FAULT_NS, "↯"), (sample.BRANCH_NS, "◆")):
            column = t_ns * timeline.columns // span
            assert timeline.column_of(t_ns) == column
            assert row[column] == glyph
        assert row[0] == "▼"  # the cursor starts at t=0, over the snapshot there

    run(scenario)


def test_the_cursor_stays_visible_over_a_fault_mark() -> None:
    async def scenario(pilot, app, timeline: Timeline) -> None:
        timeline.cursor_ns = sample.FAULT_NS
        await pilot.pause()
        row = widget_lines(timeline)[MARKS_ROW][GUTTER_COLUMNS:]
        column = timeline.column_of(sample.FAULT_NS)
        assert row[column] == "▼" and row.count("▼") == 1
        assert "↯" in timeline.border_subtitle  # the subtitle names the mark under the cursor
        timeline.cursor_ns = 0
        await pilot.pause()
        assert widget_lines(timeline)[MARKS_ROW][GUTTER_COLUMNS:][column] == "↯"

    run(scenario)


def test_arrow_keys_scrub_by_a_round_step_and_post_where_the_cursor_went() -> None:
    async def scenario(pilot, app, timeline: Timeline) -> None:
        step = timeline.step_ns
        assert step == nice_step(sample.END_NS / timeline.columns)
        await pilot.press("right", "right")
        assert timeline.cursor_ns == 2 * step
        await pilot.press("shift+right")
        assert timeline.cursor_ns == 12 * step
        await pilot.press("left")
        assert timeline.cursor_ns == 11 * step
        await pilot.press("end")
        assert timeline.cursor_ns == sample.END_NS
        await pilot.press("home")
        assert timeline.cursor_ns == 0
        scrubbed = [message.t_ns for message in app.posted(Timeline.Scrubbed)]
        assert scrubbed == [step, 2 * step, 12 * step, 11 * step, sample.END_NS, 0]
        assert all(message.final for message in app.posted(Timeline.Scrubbed))

    run(scenario)


def test_brackets_jump_between_faults_branches_and_failures_but_not_snapshots() -> None:
    async def scenario(pilot, app, timeline: Timeline) -> None:
        timeline.cursor_ns = 900 * MS
        await pilot.press("right_square_bracket")
        assert timeline.cursor_ns == sample.BRANCH_NS
        await pilot.press("right_square_bracket")
        assert timeline.cursor_ns == sample.FAULT_NS
        assert "↯ f3 bitflip rank5 @972ms" in str(timeline.border_subtitle)
        await pilot.press("right_square_bracket", "right_square_bracket")
        assert timeline.cursor_ns == sample.FAILURE_NS
        await pilot.press("left_square_bracket")
        assert timeline.cursor_ns == sample.FAULT_NS

    run(scenario)


def test_setting_the_cursor_from_outside_posts_nothing_and_is_clamped() -> None:
    async def scenario(pilot, app, timeline: Timeline) -> None:
        timeline.cursor_ns = 500 * MS
        timeline.cursor_ns = sample.END_NS + 5 * MS
        await pilot.pause()
        assert timeline.cursor_ns == sample.END_NS
        assert app.posted(Timeline.Scrubbed) == []

    run(scenario)


def test_click_and_drag_scrub_with_the_mouse() -> None:
    async def scenario(pilot, app, timeline: Timeline) -> None:
        column = 30
        # x is in widget coordinates: 1 column of padding, then the gutter
        await pilot.click(Timeline, offset=(1 + GUTTER_COLUMNS + column, 2))
        step = timeline.step_ns
        expected = round(timeline.column_start_ns(column) / step) * step
        assert timeline.cursor_ns == expected
        finals = [message.final for message in app.posted(Timeline.Scrubbed)]
        assert finals[0] is False and finals[-1] is True
        await pilot.mouse_down(Timeline, offset=(1 + GUTTER_COLUMNS + 10, 2))
        await pilot.hover(Timeline, offset=(1 + GUTTER_COLUMNS + 50, 2))
        await pilot.mouse_up(Timeline, offset=(1 + GUTTER_COLUMNS + 50, 2))
        expected = round(timeline.column_start_ns(50) / step) * step
        assert timeline.cursor_ns == expected
        assert app.posted(Timeline.Scrubbed)[-1].t_ns == expected

    run(scenario)


def test_zoom_halves_the_window_around_the_cursor_and_zero_shows_everything() -> None:
    async def scenario(pilot, app, timeline: Timeline) -> None:
        timeline.cursor_ns = 600 * MS
        await pilot.press("plus")
        assert timeline.view_end_ns - timeline.view_start_ns == sample.END_NS // 2
        assert timeline.view_start_ns == 300 * MS
        assert timeline.step_ns < nice_step(sample.END_NS / timeline.columns)
        await pilot.press("0")
        assert (timeline.view_start_ns, timeline.view_end_ns) == (0, sample.END_NS)

    run(scenario)


def test_loss_row_flags_the_nan_and_likelihood_marks_the_point_of_no_return() -> None:
    async def scenario(pilot, app, timeline: Timeline) -> None:
        lines = widget_lines(timeline)
        loss = lines[LOSS_ROW][GUTTER_COLUMNS:]
        assert loss[timeline.column_of(sample.FAILURE_NS)] == "!"
        assert "!" not in loss[: timeline.column_of(sample.FAILURE_NS)]
        assert loss[0] == "█"  # the highest loss is the first one
        assert timeline.point_of_no_return_ns == 980 * MS
        likelihood = lines[LIKELIHOOD_ROW][GUTTER_COLUMNS:]
        assert likelihood[timeline.column_of(980 * MS)] == "▲"
        assert "no return 980ms" in str(timeline.border_subtitle)

    run(scenario)


def test_without_likelihood_the_row_says_how_to_get_it() -> None:
    async def scenario(pilot, app, timeline: Timeline) -> None:
        assert "run :likelihood" in widget_lines(timeline)[LIKELIHOOD_ROW]
        assert timeline.point_of_no_return_ns is None

    run(scenario, sample.timeline_data(likelihood=False))


def test_a_torch_run_adds_a_row_per_rank_with_its_collectives_and_steps() -> None:
    from dataclasses import replace

    from timetravel.tui.model import CollectiveSpan, StepMark

    spans = (
        CollectiveSpan("r0", "all_reduce", "0", 4, 100 * MS, 500 * MS),
        CollectiveSpan("r1", "broadcast", "0", 5, 100 * MS, 110 * MS),
        CollectiveSpan("r1", "all_reduce", "0", 9, 900 * MS, None),  # never completed: a hang
    )
    steps = (StepMark("r0", 1, 600 * MS), StepMark("r1", 1, 600 * MS))
    data = replace(sample.timeline_data(), lanes=("r0", "r1"), collectives=spans, steps=steps)

    async def scenario(pilot, app, timeline: Timeline) -> None:
        await pilot.pause()
        assert timeline.outer_size.height == 8  # the top border, five rows, two ranks
        lines = widget_lines(timeline)
        r0, r1 = lines[5], lines[6]
        assert r0.startswith("r0") and r1.startswith("r1")
        column = timeline.column_of
        assert r0[GUTTER_COLUMNS + column(100 * MS) :].startswith("all_reduce 0#4━")  # wide: labelled
        assert r0[GUTTER_COLUMNS + column(600 * MS)] == "│" == r1[GUTTER_COLUMNS + column(600 * MS)]
        assert r1[GUTTER_COLUMNS + column(100 * MS)] == "b"  # too narrow for its label: the op's letter
        hung = r1[GUTTER_COLUMNS + column(900 * MS) :].rstrip()
        assert hung.startswith("all_reduce 0#9") or hung.startswith("a━")  # drawn to the end of the view
        assert len(hung) == timeline.columns - column(900 * MS)

    run(scenario, data, size=(80, 12))
