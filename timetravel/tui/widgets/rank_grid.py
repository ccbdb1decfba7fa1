"""RankGrid: every rank a cell, the odd ones out first — which rank went bad, and who is it waiting on?

Modes (``m`` cycles): the rank's state (healthy ``●``, slow ``◐``, partitioned ``◌``, hung ``⊘``
— the rank a hang names, the one the others wait for —, diverged ``≠``, crashed ``✖``, NaN ``!``), steps behind the leader, collective sequence number against the
majority's, and time since the rank last made progress. Outliers come first, worst first; when
the ranks do not fit they fold into buckets of consecutive ranks (underlined, labelled by their
first rank, showing their worst member) — see :mod:`timetravel.tui.rank_layout`.

Arrows move the selection; the line under the grid says everything known about the selected rank
(step, collective, progress, what it waits on). Enter (or a click) on a rank posts
:class:`RankGrid.RankSelected` so the owner opens it in the inspector; on a bucket it zooms into
that bucket's ranks, and backspace zooms out.
"""

from __future__ import annotations

from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.reactive import reactive
from textual.widget import Widget

from timetravel.tui import rank_layout
from timetravel.tui.css import component_classes, css_beside
from timetravel.tui.model import RANK_STATES, RankCell
from timetravel.tui.rank_layout import MODE_TITLES, MODES, VALUE_WIDTHS, GridItem, RankColumns
from timetravel.tui.safe_lines import TerminalSafeLines

WIDE_DETAIL_COLUMNS = 70
"""From this content width the selected rank's detail fits one line; narrower grids give it two."""


class RankGrid(TerminalSafeLines, Widget, can_focus=True):
    """Every rank as a cell. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)
    COMPONENT_CLASSES: ClassVar[set[str]] = component_classes(
        "rank-grid", "label", "selected", "bucket", "summary", "detail", *RANK_STATES
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "move(-1, 0)", "left", show=False, tooltip="select the previous cell"),
        Binding("right", "move(1, 0)", "right", show=False, tooltip="select the next cell"),
        Binding("up", "move(0, -1)", "up", show=False, tooltip="select the cell above"),
        Binding("down", "move(0, 1)", "down", show=False, tooltip="select the cell below"),
        Binding(
            "enter",
            "activate",
            "open rank",
            tooltip="open the rank in the state inspector (zoom into a bucket)",
        ),
        Binding(
            "m",
            "cycle_mode",
            "mode",
            tooltip="next mode: state, steps behind, collective seq, time since progress",
        ),
        Binding(
            "backspace",
            "zoom_out",
            "all ranks",
            show=False,
            tooltip="back to all ranks after zooming into a bucket",
        ),
    ]

    cells: reactive[tuple[RankCell, ...]] = reactive(())
    now_ns: reactive[int] = reactive(0)
    mode: reactive[str] = reactive("state")
    selected: reactive[int] = reactive(0)
    zoom: reactive[tuple[str, ...]] = reactive(())

    class RankSelected(Message):
        """The user opened rank ``name`` (to inspect it)."""

        def __init__(self, grid: RankGrid, name: str) -> None:
            super().__init__()
            self.grid = grid
            self.name = name

        @property
        def control(self) -> RankGrid:
            return self.grid

    def __init__(
        self,
        cells: tuple[RankCell, ...] = (),
        now_ns: int = 0,
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self._items: list[GridItem] = []
        self._items_key: tuple[object, ...] | None = None
        self._columns = RankColumns(())
        self._columns_key: tuple[object, ...] | None = None
        self.set_reactive(RankGrid.cells, tuple(cells))
        self.set_reactive(RankGrid.now_ns, now_ns)
        self._update_title()

    # -- layout ---------------------------------------------------------------------------------

    @property
    def visible_cells(self) -> tuple[RankCell, ...]:
        """The ranks in view: all of them, or the members of the bucket zoomed into."""
        return self.columns.cells

    @property
    def columns(self) -> RankColumns:
        """The visible ranks as numpy columns (built once per change of cells or zoom)."""
        key = (self.cells, self.zoom)
        if self._columns_key != key:
            cells = self.cells
            if self.zoom:
                members = set(self.zoom)
                cells = tuple(cell for cell in cells if cell.name in members)
            self._columns = RankColumns(cells)
            self._columns_key = key
        return self._columns

    @property
    def cell_width(self) -> int:
        label_width = max((len(label) for label in self.columns.labels.values()), default=1)
        return label_width + VALUE_WIDTHS[self.mode] + 1

    @property
    def grid_columns(self) -> int:
        return max(1, self.content_size.width // self.cell_width)

    @property
    def detail_lines(self) -> int:
        """Lines kept for the selected rank's detail (wrapped at `` · ``)."""
        return 1 if self.content_size.width >= WIDE_DETAIL_COLUMNS else 2

    @property
    def footer_lines(self) -> int:
        """Lines under the grid: the selected rank's detail and the summary."""
        return self.detail_lines + 1

    @property
    def capacity(self) -> int:
        rows = max(1, self.content_size.height - self.footer_lines)
        return self.grid_columns * rows

    @property
    def items(self) -> list[GridItem]:
        """The cells drawn, in order (outliers first); computed once per change of its inputs."""
        key = (self.cells, self.zoom, self.mode, self.now_ns, self.capacity)
        if self._items_key != key:
            self._items = rank_layout.layout(self.columns, self.mode, self.now_ns, self.capacity)
            self._items_key = key
        return self._items

    @property
    def selected_item(self) -> GridItem | None:
        items = self.items
        return items[self.selected] if 0 <= self.selected < len(items) else None

    # -- attributes -----------------------------------------------------------------------------

    def watch_cells(self) -> None:
        self._keep_selection()
        self._update_title()

    def watch_mode(self) -> None:
        self.selected = 0
        self._update_title()

    def watch_zoom(self) -> None:
        self.selected = 0
        self._update_title()

    def _keep_selection(self) -> None:
        count = len(self.items)
        if self.selected >= count:
            self.selected = max(0, count - 1)

    def _update_title(self) -> None:
        scope = f" · {len(self.zoom)} of {len(self.cells)}" if self.zoom else ""
        self.border_title = f"ranks · {MODE_TITLES[self.mode]}{scope}"

    # -- actions --------------------------------------------------------------------------------

    def action_move(self, dx: int, dy: int) -> None:
        count = len(self.items)
        if count:
            target = self.selected + dx + dy * self.grid_columns
            self.selected = max(0, min(count - 1, target))

    def action_cycle_mode(self) -> None:
        self.mode = MODES[(MODES.index(self.mode) + 1) % len(MODES)]

    def action_activate(self) -> None:
        item = self.selected_item
        if item is None:
            return
        if item.is_bucket:
            self.zoom = item.names
        else:
            self.post_message(self.RankSelected(self, item.names[0]))

    def action_zoom_out(self) -> None:
        self.zoom = ()

    def on_click(self, event: events.Click) -> None:
        offset = event.get_content_offset(self)
        if offset is None:
            return
        index = offset.y * self.grid_columns + offset.x // self.cell_width
        if offset.x // self.cell_width < self.grid_columns and index < len(self.items):
            self.selected = index
            self.action_activate()

    # -- drawing --------------------------------------------------------------------------------

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"rank-grid--{name}", partial=True)

    def render(self) -> Text:
        items = self.items
        columns = self.grid_columns
        label_width = self.cell_width - VALUE_WIDTHS[self.mode] - 1
        value_width = VALUE_WIDTHS[self.mode]
        text = Text(no_wrap=True, overflow="crop")
        styles = {name: self._style(name) for name in ("label", "bucket", "selected", *RANK_STATES)}
        for index, item in enumerate(items):
            if index and index % columns == 0:
                text.append("\n")
            label, value = styles["label"], styles[item.state]
            if item.is_bucket:
                label, value = label + styles["bucket"], value + styles["bucket"]
            if index == self.selected:
                label, value = label + styles["selected"], value + styles["selected"]
            text.append(item.label.rjust(label_width), label)
            plain = not item.is_bucket and index != self.selected
            # the gap after a plain cell takes the value's colour (invisible on a space), which
            # halves the segments a frame of 1,000 cells converts
            text.append(item.value.rjust(value_width) + (" " if plain else ""), value)
            if not plain:
                text.append(" ")
        rows = -(-len(items) // columns) if items else 0
        detail = self._detail_lines()
        text.append("\n" * max(1, self.content_size.height - self.footer_lines - rows + 1))
        for line in detail:
            text.append(line, self._style("detail"))
            text.append("\n")
        text.append(rank_layout.summary(self.columns, self.mode, self.now_ns), self._style("summary"))
        return text

    def _detail_lines(self) -> list[str]:
        """The selected cell's detail, wrapped at `` · `` to the width, padded to ``detail_lines``."""
        width = max(10, self.content_size.width)
        lines: list[str] = []
        for part in self._detail_text().split(" · "):
            if lines and len(lines[-1]) + 3 + len(part) <= width:
                lines[-1] += " · " + part
            else:
                lines.append(part)
        lines = lines[: self.detail_lines]
        return lines + [""] * (self.detail_lines - len(lines))

    def _detail_text(self) -> str:
        item = self.selected_item
        if item is None:
            return ""

        if item.is_bucket:
            return (
                f"{item.names[0]}…{item.names[-1]}: {len(item.names)} ranks, worst {item.state} (enter: zoom)"
            )
        position = self.columns.names.index(item.names[0])
        return rank_layout.detail(self.columns.cells[position], self.columns.leader, self.now_ns)
