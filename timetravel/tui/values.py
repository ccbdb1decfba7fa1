"""Completion values from what the screen shows: the explore command language's ValueSource.

The command language (:mod:`timetravel.explore.commands`) decides *what* belongs at the cursor —
a branch, a node, a state path, a fault id, a time; this source says *which* ones exist, from
the :class:`~timetravel.tui.model.CursorView` on screen (its world, its branches, its timeline
marks). Paths complete one segment at a time, containers with a trailing ``/``. Whole-line
candidates for the command line come from :func:`completion_lines`.
"""

from __future__ import annotations

from typing import Any

from timetravel.explore.commands import complete
from timetravel.explore.commands.complete import ValueSource
from timetravel.sim.timefmt import format_time
from timetravel.tui.describe import children, is_container, lookup
from timetravel.tui.model import CursorView

VALUES_MAX = 200
NO_SPACE_AFTER = ("/", "(")


class ViewValues:
    """Names in one CursorView, by argument kind."""

    def __init__(self, view: CursorView | None) -> None:
        self.view = view

    def values(self, kind: str, prefix: str) -> list[str]:
        view = self.view
        if view is None:
            return []
        document = view.document if isinstance(view.document, dict) else {}
        if kind == "path":
            return self._paths(document, prefix)
        if kind == "branch":
            names = [branch.name for branch in view.branches] or [view.branch]
        elif kind == "node":
            names = [str(name) for name in document.get("nodes", {})] or [cell.name for cell in view.ranks]
        elif kind == "fault":
            names = [str(fault.get("id")) for fault in document.get("faults", []) if isinstance(fault, dict)]
        elif kind == "time":
            moments = sorted({mark.t_ns for mark in view.timeline.marks} | {view.cursor_ns})
            names = [format_time(t_ns, view.unit) for t_ns in moments]
        elif kind == "setting":
            config = document.get("config", {})
            names = [f"{key}=" for key in config] if isinstance(config, dict) else []
        else:
            names = []
        return [name for name in names if name.startswith(prefix)][:VALUES_MAX]

    def _paths(self, document: dict[str, Any], prefix: str) -> list[str]:
        parent, _, fragment = prefix.rpartition("/")
        keys = [key for key in parent.split("/") if key]
        try:
            container = lookup(document, keys)
        except (KeyError, IndexError, ValueError):
            return []
        head = f"{parent}/" if parent else ""
        found = []
        for key, child in children(container):
            if str(key).startswith(fragment):
                found.append(
                    f"{head}{key}" + ("/" if is_container(child) and not hasattr(child, "dtype") else "")
                )
            if len(found) >= VALUES_MAX:
                break
        if "*".startswith(fragment) and keys and isinstance(container, dict):
            found.append(f"{head}*/")
        return found


def completion_lines(text: str, source: ValueSource | None) -> list[str]:
    """Whole-line completions of ``text`` (what the command line shows and cycles through)."""
    lines = []
    for completion in complete(text, source):
        head = text[: len(text) - completion.replace_chars] if completion.replace_chars else text
        space = "" if completion.text.endswith(NO_SPACE_AFTER) else " "
        lines.append(head + completion.text + space)
    return lines
