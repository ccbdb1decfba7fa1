"""The key map: every key the TUI answers to, read from the widgets' own bindings.

A binding's ``description`` is its short footer label; its ``tooltip`` is the sentence the map
shows (the description when there is none).

One source for three readers: the ``?`` screen, the footer (through the bindings themselves) and
docs/tui.md (a test checks that the doc's table equals :func:`keymap_rows`). Keys that a widget
inherits from Textual (a tree's enter and space) are listed in ``INHERITED_KEYS`` so the map is
complete without listing Textual's every scrolling binding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from textual.binding import Binding
from textual.keys import format_key

INHERITED_KEYS: dict[str, list[tuple[str, str]]] = {
    "StateInspector": [("enter", "choose the path (print, diff)"), ("space", "expand or collapse")],
    "BranchTree": [("enter", "switch to the branch")],
    "CompareView": [("enter", "open the diff of the highlighted path")],
    "ExplainPane": [("enter", "move the cursor to the highlighted link of the chain")],
    "CommandLine": [("enter", "run the command")],
}


def key_text(keys: str) -> str:
    """``left_square_bracket,plus`` -> ``[/+``: how the keys are typed."""
    shown = []
    for key in keys.split(","):
        modifiers, _, name = key.strip().rpartition("+")
        text = format_key(name)
        shown.append(f"{modifiers}+{text}" if modifiers else text)
    return "/".join(shown)


def bindings_of(widget_class: type[Any]) -> list[Binding]:
    """The bindings a class declares itself (not those it inherits)."""
    return [binding for binding in widget_class.__dict__.get("BINDINGS", []) if isinstance(binding, Binding)]


def keymap_rows(scopes: Sequence[tuple[str, type[Any]]]) -> list[tuple[str, str, str]]:
    """(scope, keys, what they do) for every scope, in the order given."""
    rows = []
    for scope, widget_class in scopes:
        for binding in bindings_of(widget_class):
            rows.append(
                (scope, key_text(binding.key), binding.tooltip or binding.description or binding.action)
            )
        for keys, description in INHERITED_KEYS.get(widget_class.__name__, []):
            rows.append((scope, key_text(keys), description))
    return rows


def keymap_markdown(rows: Sequence[tuple[str, str, str]]) -> str:
    """The key map as a markdown table (docs/tui.md carries exactly this)."""
    lines = ["| where | keys | what |", "|---|---|---|"]
    for scope, keys, description in rows:
        escaped = keys.replace("|", "\\|")
        lines.append(f"| {scope} | `{escaped}` | {description} |")
    return "\n".join(lines)
