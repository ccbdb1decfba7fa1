"""EventLog: virtualized over any source, follows the cursor, filters by node and kind, jumps."""

from __future__ import annotations

from tests.tui.harness import Harness, drive
from timetravel.scenarios import get_scenario
from timetravel.tui.feed import EventTable, run_with_events
from timetravel.tui.model import EventRow
from timetravel.tui.widgets.event_log import EventLog

ROWS = 10_000_000


class ArithmeticSource:
    """Ten million events that exist only when asked for: event i is at i microseconds on node i % 7."""

    def __init__(self, indices: range = range(ROWS)) -> None:
        self.indices = indices
        self.fetched = 0

    def __len__(self) -> int:
        return len(self.indices)

    def row(self, index: int) -> EventRow:
        self.fetched += 1
        number = self.indices[index]
        return EventRow(number, number * 1000, f"n{number % 7}", "tick", "")

    def index_at_time(self, t_ns: int) -> int:
        number = t_ns // 1000
        if number < self.indices.start:
            return -1
        return min(len(self) - 1, (number - self.indices.start) // self.indices.step)

    def index_of_number(self, number: int) -> int:
        index = max(0, -(-(number - self.indices.start) // self.indices.step))
        return index if index < len(self) else -1

    def filtered(self, node: str | None = None, kind: str | None = None) -> ArithmeticSource:
        if node is None:
            return self
        return ArithmeticSource(range(int(node[1:]), ROWS, 7))

    def node_names(self) -> list[str]:
        return [f"n{i}" for i in range(7)]

    def kind_names(self) -> list[str]:
        return ["tick"]


def run(scenario, source, size=(80, 14)) -> None:
    log = EventLog(source)
    app = Harness(log)

    async def wrapped(pilot) -> None:
        log.focus()
        await pilot.pause()
        await scenario(pilot, app, log)

    drive(app, wrapped, size)


def test_ten_million_rows_render_only_the_visible_ones() -> None:
    source = ArithmeticSource()

    async def scenario(pilot, app, log: EventLog) -> None:
        height = log.scrollable_content_region.height
        assert log.virtual_size.height == ROWS
        assert source.fetched <= 3 * height  # column widths read one row, each paint reads the screen
        before = source.fetched
        log.cursor_ns = 9_000_000 * 1000 + 500  # event 9,000,000 is the last at or before the cursor
        await pilot.pause()
        assert log.selected == 9_000_000
        assert log.selected_row == EventRow(9_000_000, 9_000_000_000, f"n{9_000_000 % 7}", "tick", "")
        assert log.scroll_offset.y <= 9_000_000 < log.scroll_offset.y + height
        assert source.fetched - before <= 3 * height

    run(scenario, source)


def test_filter_to_the_selected_events_node_keeps_the_selection() -> None:
    async def scenario(pilot, app, log: EventLog) -> None:
        log.cursor_ns = 100 * 1000
        await pilot.pause()
        assert log.selected_row is not None and log.selected_row.dst == "n2"  # 100 % 7
        await pilot.press("n")
        assert log.node_filter == "n2"
        assert len(log.view) == len(range(2, ROWS, 7))
        assert log.selected_row is not None and log.selected_row.number == 100
        assert "node=n2" in str(log.border_title)
        await pilot.press("down")
        assert log.selected_row.number == 107
        await pilot.press("n")
        assert log.node_filter == ""
        assert log.selected_row.number == 107

    run(scenario, ArithmeticSource())


def pingpong_events():
    scenario = get_scenario("pingpong")
    world, events = run_with_events(scenario, scenario.resolve_config(["rounds=50"]), 3)
    return world, events


def test_a_real_run_enter_posts_the_event_and_kind_filter_narrows() -> None:
    world, events = pingpong_events()
    # 1 start + 50 pings to pong + 50 pongs to ping
    assert len(events) == world.events_processed == 101

    async def scenario(pilot, app, log: EventLog) -> None:
        log.cursor_ns = events[10].t
        await pilot.pause()
        assert log.selected == 10
        await pilot.press("enter")
        chosen = app.posted(EventLog.EventChosen)[-1]
        assert (chosen.number, chosen.t_ns) == (10, events[10].t)
        await pilot.press("k")
        assert log.kind_filter == events[10].kind
        assert len(log.view) == sum(1 for event in events if event.kind == events[10].kind)
        await pilot.press("x")
        assert len(log.view) == 101
        assert log.jump_to_number(77) and log.selected_row.number == 77
        assert not log.jump_to_number(500)

    run(scenario, EventTable(events))


def test_event_table_filters_by_node_and_kind_and_finds_times() -> None:
    _world, events = pingpong_events()
    table = EventTable(events)
    pongs = table.filtered(node="pong")
    assert len(pongs) == 50 and {pongs.row(i).kind for i in range(50)} == {"ping"}
    assert pongs.row(0).number == 1
    assert table.filtered(node="ping", kind="pong").row(0).number == 2
    assert len(table.filtered(node="nobody")) == 0
    assert table.index_at_time(events[40].t) == 40
    assert table.index_at_time(-1) == -1
    assert pongs.index_of_number(2) == 1  # event 2 goes to ping; the next pong event is #3
    assert table.node_names() == ["ping", "pong"]
