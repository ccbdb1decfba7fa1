"""Run one or more widgets in a bare App under Pilot, and record the messages they post."""

from __future__ import annotations

import asyncio
import io
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import textual
from rich.console import Console
from textual import on
from textual.app import App, ComposeResult
from textual.message import Message
from textual.pilot import Pilot
from textual.widget import Widget

from timetravel.tui import widgets


class Harness(App[None]):
    """Composes the given widgets and keeps every message they post."""

    def __init__(self, *widgets: Widget) -> None:
        super().__init__()
        self._widgets = widgets
        self.messages: list[Message] = []

    def compose(self) -> ComposeResult:
        yield from self._widgets

    @on(widgets.Timeline.Scrubbed)
    @on(widgets.RankGrid.RankSelected)
    @on(widgets.EventLog.EventChosen)
    @on(widgets.StateInspector.PathChosen)
    @on(widgets.BranchTree.BranchChosen)
    @on(widgets.BranchTree.CompareRequested)
    @on(widgets.CompareView.PathChosen)
    @on(widgets.CommandLine.CommandSubmitted)
    @on(widgets.CommandLine.Dismissed)
    def record(self, message: Message) -> None:
        self.messages.append(message)

    def posted(self, kind: type[Message]) -> list[Any]:
        return [message for message in self.messages if isinstance(message, kind)]


def drive(
    app: App[Any], scenario: Callable[[Pilot[Any]], Awaitable[None]], size: tuple[int, int] = (80, 24)
) -> None:
    """Run ``scenario`` against ``app`` at a fixed terminal size."""

    async def main() -> None:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            await scenario(pilot)

    asyncio.run(main())


def screen_text(app: App[Any]) -> str:
    """The screen as plain text, line by line (what a user reads, without colours)."""
    width, height = app.size
    console = Console(width=width, height=height, file=io.StringIO(), record=True, color_system=None)
    console.print(app.screen._compositor.render_update(full=True, screen_stack=app._background_screens))
    return console.export_text()


def widget_lines(widget: Widget) -> list[str]:
    """A render()-based widget's content as plain lines."""
    return widget.render().plain.split("\n")  # type: ignore[union-attr]


SNAPSHOT_DIR = Path(__file__).parent / "snapshots"
UPDATE_ENV = "TIMETRAVEL_UPDATE_SNAPSHOTS"


def assert_snapshot(app: App[Any], name: str) -> None:
    """The screen equals the committed snapshot ``name`` (text always; SVG on the same Textual).

    The plain text of the screen is compared exactly on every Textual version. The SVG (colours
    and styles too) is compared only when the committed file was made with the installed
    Textual, because a new Textual may restyle its own widgets; the text file's first line
    records the version. ``TIMETRAVEL_UPDATE_SNAPSHOTS=1`` rewrites both after a deliberate change.
    """
    svg = app.export_screenshot(title=name)
    text = f"textual {textual.__version__}\n{screen_text(app)}"
    svg_path, text_path = SNAPSHOT_DIR / f"{name}.svg", SNAPSHOT_DIR / f"{name}.txt"
    if os.environ.get(UPDATE_ENV) == "1":
        SNAPSHOT_DIR.mkdir(exist_ok=True)
        svg_path.write_text(svg, encoding="utf-8")
        text_path.write_text(text, encoding="utf-8")
        return
    assert text_path.exists(), f"no snapshot {text_path.name}: run with {UPDATE_ENV}=1 once and review it"
    expected = text_path.read_text(encoding="utf-8")
    expected_version, _, expected_screen = expected.partition("\n")
    assert screen_text(app) == expected_screen, f"screen differs from {text_path.name}"
    if expected_version == f"textual {textual.__version__}":
        assert svg == svg_path.read_text(encoding="utf-8"), f"styles differ from {svg_path.name}"
