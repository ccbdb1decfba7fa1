"""A rich Console that escapes the control characters of every text it prints.

rich drops a few control characters (BEL, backspace, CR, VT, FF) from text but lets an escape
through, so a branch named ``b\\x1b]0;pwned\\x07`` in a recording retitled the terminal through the
shell's ``branches`` table. :func:`terminal_safe_console` pushes a render hook that passes every
segment of what is printed through the one sanitising function (sim/terminal_text.py); the
segments rich itself marks as control (cursor moves) are left alone.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rich.console import Console, ConsoleOptions, ConsoleRenderable, RenderHook
from rich.segment import Segment

from timetravel.sim.terminal_text import terminal_safe_lines


class _SafeRenderable:
    """``renderable`` rendered, each text segment sanitised."""

    def __init__(self, renderable: Any) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for segment in console.render(self.renderable, options):
            text = segment.text
            if segment.control or (text.isascii() and text.isprintable()) or text == "\n":
                yield segment
            else:
                yield Segment(terminal_safe_lines(text), segment.style, segment.control)


class _SafeTextHook(RenderHook):
    def process_renderables(self, renderables: list[ConsoleRenderable]) -> list[ConsoleRenderable]:
        return [_SafeRenderable(renderable) for renderable in renderables]


def terminal_safe_console(console: Console) -> Console:
    """``console``, from now on escaping control characters in what it prints (a second call on
    one console adds a hook that finds nothing left to escape)."""
    console.push_render_hook(_SafeTextHook())
    return console
