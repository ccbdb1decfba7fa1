"""MainScreen: the debugger at the cursor — timeline on top, ranks on the left, one pane on the right.

Layout at 80x24 (the smallest supported): a title line, the timeline (with a row per rank on a
torch run), a hang's flight recorder (only at the hang), the rank grid beside one
pane at a time (``1`` events, ``2`` state, ``3`` streams, ``4`` branches, ``5`` output), the
status line, the command line and the key footer. From 140 columns and 40 lines the screen
switches to a wide layout: streams under the rank grid, and events, state, branches and output
all visible in a 2x2 grid — a big terminal shows more at once rather than bigger cells.

The screen is fed a :class:`~timetravel.tui.model.CursorView` through :meth:`show` and sets each
widget's attributes from it. It handles what concerns only the view (a rank chosen in the grid
opens in the inspector and focuses the streams on it; panes switch); every other message (scrub,
event chosen, compare, command) bubbles up to the App, which runs it through the explore engine.
"""

from __future__ import annotations

from typing import ClassVar

from textual import events, on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Container, Horizontal, Vertical
from textual.screen import Screen
from textual.widget import Widget
from textual.widgets import Footer, RichLog, Static

from timetravel.tui.css import css_beside
from timetravel.tui.model import RANK_STATES, CursorView, EventSource, KernelSpan, RaceEdge
from timetravel.tui.safe_lines import SafeRichLog, SafeStatic
from timetravel.tui.timefmt import exact_time
from timetravel.tui.values import ViewValues
from timetravel.tui.widgets import (
    BranchTree,
    CommandLine,
    EventLog,
    FlightRecorder,
    RankGrid,
    StateInspector,
    StreamsView,
    Timeline,
)
from timetravel.tui.widgets.status_line import StatusLine

PANES = ("events", "state", "streams", "branches", "output")
WIDE_COLUMNS_MIN = 140
WIDE_LINES_MIN = 40
OUTPUT_LINES_MAX = 5_000
OUTPUT_WIDTH_MIN = 20
"""The output pane wraps its lines at its own width down to this. (RichLog's default, 78, made a
46-column pane render every line 78 wide and cut it: ``b1: ... -> `` without the pass/FAIL.)"""


def odd_ranks(view: CursorView) -> tuple[str, ...]:
    """The ranks to look at first: the one the failure names, then the unhealthy ones, most
    severe first (the streams pane lists them before the others)."""
    unhealthy = sorted(
        (cell for cell in view.ranks if cell.state != RANK_STATES[0]),
        key=lambda cell: -RANK_STATES.index(cell.state),
    )
    names = [view.failure_node] if view.failure_node else []
    return tuple(dict.fromkeys([*names, *(cell.name for cell in unhealthy)]))


class MainScreen(Screen[None]):
    """The debugger's main screen. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("1", "pane('events')", "events", tooltip="show and focus the event log"),
        Binding("2", "pane('state')", "state", tooltip="show and focus the state inspector"),
        Binding("3", "pane('streams')", "streams", tooltip="show and focus the GPU streams"),
        Binding("4", "pane('branches')", "branches", tooltip="show and focus the branch tree"),
        Binding("5", "pane('output')", "output", show=False, tooltip="show the commands' full output"),
        Binding("t", "focus_timeline", "timeline", show=False, tooltip="focus the timeline"),
        Binding("g", "focus_ranks", "ranks", show=False, tooltip="focus the rank grid"),
    ]

    def __init__(self, *, name: str | None = None) -> None:
        super().__init__(name=name)
        self.view: CursorView | None = None
        self.active_pane = "events"

    def compose(self) -> ComposeResult:
        yield SafeStatic("timetravel", id="title", markup=False)
        yield Timeline(id="timeline")
        yield FlightRecorder(id="flight")
        with Horizontal(id="middle"):
            with Vertical(id="left"):
                yield RankGrid(id="ranks")
                yield StreamsView(id="left-streams")
            with Container(id="panes"):
                yield EventLog(id="events", classes="pane -active")
                yield StateInspector(id="state", classes="pane")
                yield StreamsView(id="streams", classes="pane")
                yield BranchTree(id="branches", classes="pane")
                output = SafeRichLog(
                    id="output",
                    classes="pane",
                    max_lines=OUTPUT_LINES_MAX,
                    wrap=True,
                    markup=False,
                    min_width=OUTPUT_WIDTH_MIN,
                )
                output.border_title = "output"
                yield output
        yield StatusLine(id="status")
        yield CommandLine(id="command")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(Timeline).focus()
        self._apply_size(self.app.size.width, self.app.size.height)

    def on_resize(self, event: events.Resize) -> None:
        self._apply_size(event.size.width, event.size.height)

    def _apply_size(self, width: int, height: int) -> None:
        self.set_class(width >= WIDE_COLUMNS_MIN and height >= WIDE_LINES_MIN, "-wide")

    @property
    def is_wide(self) -> bool:
        return self.has_class("-wide")

    # -- feeding --------------------------------------------------------------------------------

    def show(self, view: CursorView) -> None:
        """Show ``view``: set every widget's attributes from it."""
        self.view = view
        timeline = self.query_one(Timeline)
        timeline.data = view.timeline
        timeline.cursor_ns = view.cursor_ns
        flight = self.query_one(FlightRecorder)
        flight.unit = view.unit
        flight.set_title(view.flight_title)
        flight.rows = view.flight
        grid = self.query_one(RankGrid)
        grid.cells = view.ranks
        grid.now_ns = view.cursor_ns
        odd = odd_ranks(view)
        for streams in self.query(StreamsView):
            streams.spans = view.spans
            streams.races = view.races
            streams.cursor_ns = view.cursor_ns
            streams.unit = view.unit
            streams.preferred_ranks = odd
        log = self.query_one(EventLog)
        log.unit = view.unit
        if log.source is not view.events:
            log.source = view.events
        log.cursor_ns = view.cursor_ns
        if view.event_number > 0:
            log.jump_to_number(view.event_number)
        self.query_one("#title", Static).update(self._title(view), layout=False)  # one line, fixed size
        self.query_one(CommandLine).source = ViewValues(view)
        # The state tree is the most expensive pane to draw: it follows in the next frame, so
        # that no single frame redraws every pane (the timeline and the ranks come first).
        self.call_after_refresh(self._show_state, view)

    def _show_state(self, view: CursorView) -> None:
        if view is not self.view:
            return  # a newer view came meanwhile; its own call follows
        inspector = self.query_one(StateInspector)
        inspector.border_title = f"state @{exact_time(view.cursor_ns, view.unit)}"
        inspector.document = view.document
        tree = self.query_one(BranchTree)
        tree.unit = view.unit
        tree.branches = view.branches
        tree.current = view.branch

    def show_streams(self, spans: tuple[KernelSpan, ...], races: tuple[RaceEdge, ...]) -> None:
        """New kernel spans around the cursor (sampled after the view was shown)."""
        for streams in self.query(StreamsView):
            streams.spans = spans
            streams.races = races

    def show_events(self, source: EventSource | None) -> None:
        """A new event index (built after the view was shown)."""
        log = self.query_one(EventLog)
        if log.source is not source:
            log.source = source
        if self.view is not None and self.view.event_number > 0:
            log.jump_to_number(self.view.event_number)

    def sync_cursor(self) -> None:
        """Put the timeline's cursor back where the view stands (a scrub that was not run)."""
        if self.view is not None:
            self.query_one(Timeline).cursor_ns = self.view.cursor_ns

    def _title(self, view: CursorView) -> str:
        where = f"{exact_time(view.cursor_ns, view.unit)} #{view.event_number:,}"
        parts = [view.title, view.branch, where]
        if view.status:
            parts.append(view.status)
        return " · ".join(parts)

    # -- panes ----------------------------------------------------------------------------------

    def action_pane(self, name: str) -> None:
        """Show pane ``name`` (in the narrow layout the others hide) and focus it."""
        self.active_pane = name
        for pane in self.query_one("#panes").children:
            pane.set_class(pane.id == name, "-active")
        target = self.query_one(f"#{name}", Widget)
        if self.is_wide and name == "streams":
            target = self.query_one("#left-streams", Widget)
        target.focus()

    def action_focus_timeline(self) -> None:
        self.query_one(Timeline).focus()

    def action_focus_ranks(self) -> None:
        self.query_one(RankGrid).focus()

    def write_output(self, text: str) -> None:
        """Append a command's full answer to the output pane."""
        self.query_one("#output", RichLog).write(text)

    @on(RankGrid.RankSelected)
    def open_rank(self, message: RankGrid.RankSelected) -> None:
        """Open the chosen rank in the inspector and focus the streams on it (a view change only)."""
        for streams in self.query(StreamsView):
            streams.focus_ranks = (message.name,)
        self.action_pane("state")
        self.query_one(StateInspector).show_path(f"nodes/{message.name}")
