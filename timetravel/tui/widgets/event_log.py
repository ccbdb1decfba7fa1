"""EventLog: the run's events at the cursor — what happened just before it went wrong, and where?

Virtualized: the log holds an :class:`~timetravel.tui.model.EventSource` and asks it for exactly
the rows on screen (``render_line``), so a recording of ten million events scrolls as fast as one
of ten. The selected row follows the cursor (the last event at or before it); events after the
cursor are dimmed — they are the future of the current position. Fault events stand out.

Keys: arrows/page keys move the selection; enter posts :class:`EventLog.EventChosen` (the owner
seeks to that event); ``n`` filters to the selected event's node and ``k`` to its kind (press
again to drop that filter), ``x`` clears both. ``jump_to_number`` and ``jump_to_time`` select an
event from code (the command line's ``events #N``).
"""

from __future__ import annotations

from typing import Any, ClassVar

from rich.segment import Segment
from rich.style import Style
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from timetravel.tui.css import component_classes, css_beside
from timetravel.tui.model import EventRow, EventSource
from timetravel.tui.safe_lines import TerminalSafeLines
from timetravel.tui.timefmt import fixed_time

NODE_COLUMNS_MAX = 12
KIND_COLUMNS_MAX = 14
FAULT_KINDS = ("fault",)


class EventLog(TerminalSafeLines, ScrollView, can_focus=True):
    """A virtualized log of events. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)
    COMPONENT_CLASSES: ClassVar[set[str]] = component_classes(
        "event-log", "selected", "future", "fault", "number"
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up", "move(-1)", "up", show=False, tooltip="previous event"),
        Binding("down", "move(1)", "down", show=False, tooltip="next event"),
        Binding("pageup", "page(-1)", "page up", show=False, tooltip="a page of events up"),
        Binding("pagedown", "page(1)", "page down", show=False, tooltip="a page of events down"),
        Binding("home", "edge(-1)", "first", show=False, tooltip="first event"),
        Binding("end", "edge(1)", "last", show=False, tooltip="last event"),
        Binding("enter", "choose", "seek here", tooltip="seek the cursor to the selected event"),
        Binding(
            "n", "filter_node", "node filter", tooltip="only the selected event's node (again: all nodes)"
        ),
        Binding(
            "k", "filter_kind", "kind filter", tooltip="only the selected event's kind (again: all kinds)"
        ),
        Binding("x", "clear_filters", "clear filters", show=False, tooltip="drop both filters"),
    ]

    source: reactive[Any] = reactive(None, always_update=True)
    node_filter: reactive[str] = reactive("")
    kind_filter: reactive[str] = reactive("")
    cursor_ns: reactive[int] = reactive(0)
    selected: reactive[int] = reactive(-1)
    unit: reactive[str] = reactive("ms")

    class EventChosen(Message):
        """The user chose event ``number`` (at ``t_ns``): seek there."""

        def __init__(self, log: EventLog, number: int, t_ns: int) -> None:
            super().__init__()
            self.log = log
            self.number = number
            self.t_ns = t_ns

        @property
        def control(self) -> EventLog:
            return self.log

    def __init__(
        self,
        source: EventSource | None = None,
        *,
        unit: str = "ms",
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._view: EventSource | None = None
        self.rows_fetched = 0
        self._base_style: Style | None = None
        """How many rows were fetched from the source so far (the virtualization is tested on it)."""
        self.set_reactive(EventLog.unit, unit)
        if source is not None:
            self.set_reactive(EventLog.source, source)
            self._rebuild_view()

    # -- the filtered view ----------------------------------------------------------------------

    @property
    def view(self) -> EventSource | None:
        """The rows shown: the source, filtered by node and kind."""
        return self._view

    def _rebuild_view(self) -> None:
        source = self.source
        if source is None:
            self._view = None
        elif self.node_filter or self.kind_filter:
            self._view = source.filtered(node=self.node_filter or None, kind=self.kind_filter or None)
        else:
            self._view = source
        self._widths = self._column_widths()
        count = len(self._view) if self._view is not None else 0
        self.virtual_size = Size(0, count)
        self._follow_cursor()
        self._update_title()
        self.refresh()

    def _column_widths(self) -> tuple[int, int, int, int]:
        view = self._view
        if view is None or not len(view):
            return (1, 1, 1, 1)
        source = self.source
        last = view.row(len(view) - 1)
        number_width = len(str(last.number)) + 1
        time_width = len(fixed_time(last.t_ns, self.unit))
        node_width = min(NODE_COLUMNS_MAX, max((len(name) for name in source.node_names()), default=1))
        kind_width = min(KIND_COLUMNS_MAX, max((len(name) for name in source.kind_names()), default=1))
        return number_width, time_width, node_width, kind_width

    def watch_source(self) -> None:
        self._rebuild_view()

    def watch_node_filter(self) -> None:
        self._rebuild_view()

    def watch_kind_filter(self) -> None:
        self._rebuild_view()

    def watch_cursor_ns(self) -> None:
        self._follow_cursor()
        self.refresh()

    def watch_selected(self) -> None:
        self._scroll_to_selected()
        self.call_after_refresh(self._scroll_to_selected)  # once a new virtual size is laid out
        self.refresh()

    def _follow_cursor(self) -> None:
        if self._view is not None:
            self.selected = self._view.index_at_time(self.cursor_ns)

    def _update_title(self) -> None:
        count = len(self._view) if self._view is not None else 0
        filters = [
            f"{name}={value}"
            for name, value in (("node", self.node_filter), ("kind", self.kind_filter))
            if value
        ]
        self.border_title = " · ".join([f"events {count:,}", *filters])
        self.border_subtitle = f"time in {self.unit}"

    def _scroll_to_selected(self) -> None:
        height = self.scrollable_content_region.height
        if self.selected < 0 or height <= 0:
            return
        top = round(self.scroll_offset.y)
        if not top <= self.selected < top + height:
            self.scroll_to(y=max(0, self.selected - height // 2), animate=False, immediate=True)

    # -- selection and commands -----------------------------------------------------------------

    @property
    def selected_row(self) -> EventRow | None:
        view = self._view
        if view is None or not 0 <= self.selected < len(view):
            return None
        return view.row(self.selected)

    def jump_to_number(self, number: int) -> bool:
        """Select event ``number`` (or the next one the filter shows); False when there is none."""
        if self._view is None:
            return False
        index = self._view.index_of_number(number)
        if index < 0:
            return False
        self.selected = index
        return True

    def jump_to_time(self, t_ns: int) -> None:
        """Select the last event at or before ``t_ns``."""
        if self._view is not None:
            self.selected = self._view.index_at_time(t_ns)

    def action_move(self, delta: int) -> None:
        if self._view is not None and len(self._view):
            self.selected = max(0, min(len(self._view) - 1, self.selected + delta))

    def action_page(self, direction: int) -> None:
        self.action_move(direction * max(1, self.scrollable_content_region.height - 1))

    def action_edge(self, direction: int) -> None:
        if self._view is not None and len(self._view):
            self.selected = len(self._view) - 1 if direction > 0 else 0

    def action_choose(self) -> None:
        row = self.selected_row
        if row is not None:
            self.post_message(self.EventChosen(self, row.number, row.t_ns))

    def _refilter(self, node: str, kind: str) -> None:
        row = self.selected_row
        self.node_filter, self.kind_filter = node, kind
        if row is not None:
            self.jump_to_number(row.number)

    def action_filter_node(self) -> None:
        row = self.selected_row
        if self.node_filter:
            self._refilter("", self.kind_filter)
        elif row is not None:
            self._refilter(row.dst, self.kind_filter)

    def action_filter_kind(self) -> None:
        row = self.selected_row
        if self.kind_filter:
            self._refilter(self.node_filter, "")
        elif row is not None:
            self._refilter(self.node_filter, row.kind)

    def action_clear_filters(self) -> None:
        self._refilter("", "")

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is not None and self._view is not None:
            index = round(self.scroll_offset.y) + offset.y
            if 0 <= index < len(self._view):
                self.selected = index

    # -- drawing --------------------------------------------------------------------------------

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"event-log--{name}", partial=True)

    def render_lines(self, crop: Region) -> list[Strip]:
        # The widget's own style is the same for every line of one drawing; reading it walks the
        # DOM, so it is read once here rather than once per line.
        self._base_style = self.rich_style
        try:
            return super().render_lines(crop)
        finally:
            self._base_style = None

    def render_line(self, y: int) -> Strip:
        index = round(self.scroll_offset.y) + y
        width = self.scrollable_content_region.width
        base = self._base_style or self.rich_style
        view = self._view
        if view is None or not 0 <= index < len(view):
            return Strip.blank(width, base)
        self.rows_fetched += 1
        row = view.row(index)
        number_width, time_width, node_width, kind_width = self._widths
        number = f"#{row.number}".rjust(number_width)
        rest = (
            f" {fixed_time(row.t_ns, self.unit).rjust(time_width)}"
            f" {row.dst[:node_width].ljust(node_width)}"
            f" {row.kind[:kind_width].ljust(kind_width)}"
            f" {row.payload}"
        )
        style = base
        if row.t_ns > self.cursor_ns:
            style = style + self._style("future")
        elif row.kind in FAULT_KINDS:
            style = style + self._style("fault")
        if index == self.selected:
            style = style + self._style("selected")
        number_style = style + self._style("number") if index != self.selected else style
        strip = Strip([Segment(number, number_style), Segment(rest, style)])
        return strip.crop_extend(0, width, style)
