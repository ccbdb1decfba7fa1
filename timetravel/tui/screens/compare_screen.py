"""CompareScreen (two runs compared) and DiffScreen (one path of both worlds, side by side).

The compare screen is a :class:`~timetravel.tui.widgets.CompareView` with a footer; enter on a
differing path posts ``CompareView.PathChosen`` to the App, which fetches both worlds at the
comparison time and pushes a :class:`DiffScreen`: two state inspectors opened at that path, the
differing paths marked ``●`` in both. Escape goes back one screen.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import DataTable, Footer

from timetravel.tui.css import css_beside
from timetravel.tui.model import CompareData
from timetravel.tui.safe_lines import SafeStatic
from timetravel.tui.timefmt import exact_time
from timetravel.tui.widgets import CompareView, StateInspector


class CompareScreen(Screen[None]):
    """Two runs compared, full screen."""

    DEFAULT_CSS = css_beside(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "back")]

    def __init__(self, data: CompareData) -> None:
        super().__init__()
        self.data = data
        self.diff_at_ns: int | None = None
        """Where a chosen path's diff compares the worlds: None at the first divergence (each
        side right after its diverging event, as ``compare`` and ``diff`` list the paths), else
        at this time (a ``diff --at T`` typed)."""

    def compose(self) -> ComposeResult:
        yield CompareView(self.data)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(DataTable).focus()


class DiffScreen(Screen[None]):
    """One path of two worlds side by side, the differing paths marked."""

    DEFAULT_CSS = css_beside(__file__)
    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "back")]

    def __init__(
        self,
        names: tuple[str, str],
        documents: tuple[Any, Any],
        path: str,
        differing: Iterable[str],
        at_ns: int,
        unit: str = "ms",
    ) -> None:
        super().__init__()
        self.names = names
        self.documents = documents
        self.path = path
        self.differing = frozenset(differing)
        self.at_ns = at_ns
        self.unit = unit

    def compose(self) -> ComposeResult:
        when = exact_time(self.at_ns, self.unit)
        yield SafeStatic(
            f"diff {self.path} @{when}: {self.names[0]} | {self.names[1]}", id="diff-title", markup=False
        )
        with Horizontal(id="diff-sides"):
            for name, document in zip(self.names, self.documents, strict=True):
                yield StateInspector(document, title=f"{name} @{when}")
        yield Footer()

    def on_mount(self) -> None:
        inspectors = list(self.query(StateInspector))
        for inspector in inspectors:
            inspector.highlight_paths = self.differing
            inspector.show_path(self.path)
        inspectors[0].focus()
