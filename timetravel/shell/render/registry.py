"""Results to rich renderables: one renderer per result type.

Every command of the command language returns a structured result (a frozen dataclass with
``to_data()``). The shell turns each into rich tables, trees and plots; the TUI renders the same
objects its own way, ``--json`` prints ``to_data()`` and the language's ``render_text`` gives the
plain form. A renderer registers itself for result types with :func:`renders`; :func:`render`
looks a result up by its class and then its bases, so a subclass inherits its base's renderer.
A result without a renderer still shows: its ``to_data()`` pretty-printed (or its ``str``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich.console import Group, RenderableType
from rich.pretty import Pretty
from rich.text import Text

from timetravel.sim.timefmt import DISPLAY_UNIT_DEFAULT, format_time


@dataclass(frozen=True)
class RenderContext:
    """What rendering may depend on: the recording's display unit and the terminal width."""

    unit: str = DISPLAY_UNIT_DEFAULT
    width: int = 100

    def time(self, t_ns: int | None) -> str:
        return "-" if t_ns is None else format_time(t_ns, self.unit)


Renderer = Callable[[Any, RenderContext], RenderableType]
_RENDERERS: dict[type, Renderer] = {}


def renders(*result_types: type) -> Callable[[Renderer], Renderer]:
    """Register the decorated function as the renderer of ``result_types``."""

    def register(function: Renderer) -> Renderer:
        for result_type in result_types:
            assert result_type not in _RENDERERS, f"two renderers for {result_type.__name__}"
            _RENDERERS[result_type] = function
        return function

    return register


def renderer_for(result: object) -> Renderer | None:
    for cls in type(result).__mro__:
        found = _RENDERERS.get(cls)
        if found is not None:
            return found
    return None


def render(result: object, context: RenderContext) -> RenderableType | None:
    """The renderable for one result (None for a command that returns nothing to show)."""
    if result is None:
        return None
    if isinstance(result, str):
        return Text(result)
    found = renderer_for(result)
    if found is not None:
        return found(result, context)
    to_data = getattr(result, "to_data", None)
    if callable(to_data):
        return Group(Text(type(result).__name__, style="bold"), Pretty(to_data()))
    return Text(str(result))


def registered_types() -> tuple[type, ...]:
    """The result types that have a renderer."""
    return tuple(_RENDERERS)
