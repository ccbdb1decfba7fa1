"""StateInspector: the world at the cursor as a lazily expanded tree — is there a NaN in there, and where?

The tree holds a plain-data document (a World's ``to_data()`` or a Session's view of it) and
creates a node's children only when it is expanded, so a world of 1024 ranks opens instantly.
Every label is a one-line summary (:mod:`timetravel.tui.describe`): arrays by dtype, shape,
range, mean and a sparkline, with NaN/inf counts in red. Expanding an array lists where its
non-finite values are and its first values.

Setting a new document (the cursor moved) keeps the expanded paths and the cursor's path, so a
user watching ``nodes/rank5/weights`` sees it change while scrubbing. ``highlight_paths`` marks
paths (and their ancestors) that differ in a comparison. ``show_path("nodes/rank5/weights")``
opens the tree down to a path, as the rank grid and the command line ask. Enter on a node posts
:class:`StateInspector.PathChosen`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from rich.style import Style
from rich.text import Text
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from timetravel.tui.css import component_classes, css_beside
from timetravel.tui.describe import array_rows, children, describe, is_container, lookup, path_text
from timetravel.tui.safe_lines import TerminalSafeLines

CHILDREN_SHOWN_MAX = 256
"""Bound on the children one expansion creates; bigger containers are split into groups of this size."""
ARRAY_VALUES_PER_ROW = 8
ARRAY_ROWS_SHOWN_MAX = 16
EXPANDED_PATHS_MAX = 1024

Path = tuple[Any, ...]


@dataclass(frozen=True)
class Entry:
    """A tree node's data: a value at ``path``, a group of its children, or a note line."""

    path: Path
    kind: str = "value"
    start: int = 0
    stop: int = 0


def split_path(text: str) -> list[str]:
    return [part for part in text.strip().strip("/").split("/") if part]


class StateInspector(TerminalSafeLines, Tree[Entry]):
    """A lazily expanded tree of the world. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)
    COMPONENT_CLASSES: ClassVar[set[str]] = component_classes(
        "inspector", "key", "summary", "alarm", "changed"
    )

    document: reactive[Any] = reactive(None, always_update=True)
    highlight_paths: reactive[frozenset[str]] = reactive(frozenset())

    class PathChosen(Message):
        """The user chose the value at ``path`` (slash-separated)."""

        def __init__(self, inspector: StateInspector, path: str) -> None:
            super().__init__()
            self.inspector = inspector
            self.path = path

        @property
        def control(self) -> StateInspector:
            return self.inspector

    def __init__(
        self,
        document: Any = None,
        *,
        title: str = "state",
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__("world", data=Entry(()), name=name, id=id, classes=classes)
        self.show_root = False
        self.auto_expand = False
        self._loaded: set[int] = set()
        self._expanded: list[Path] = []
        self.border_title = title
        if document is not None:
            self.set_reactive(StateInspector.document, document)

    def on_mount(self) -> None:
        self._rebuild()

    # -- document -------------------------------------------------------------------------------

    def watch_document(self) -> None:
        if self.is_mounted:
            self._rebuild()

    def watch_highlight_paths(self) -> None:
        if self.is_mounted:
            self._rebuild()

    def _rebuild(self) -> None:
        cursor = self.cursor_node
        cursor_path = cursor.data.path if cursor is not None and cursor.data is not None else None
        expanded = list(self._expanded)
        self.clear()
        self._loaded.clear()
        self._expanded = []
        self._load(self.root)
        self.root.expand()
        for path in expanded:
            self._open(path, select=False)
        if cursor_path:
            self._open(cursor_path, select=True)

    def _load(self, node: TreeNode[Entry]) -> None:
        entry = node.data
        if node.id in self._loaded or entry is None or entry.kind == "note":
            return
        self._loaded.add(node.id)
        value = lookup(self.document, entry.path) if self.document is not None else None
        if isinstance(value, np.ndarray):
            for text, style in array_rows(value, ARRAY_VALUES_PER_ROW, ARRAY_ROWS_SHOWN_MAX):
                label = Text(text, self._style("alarm") if style else self._style("summary"))
                node.add_leaf(label, data=Entry((*entry.path, text), "note"))
            return
        items = children(value)
        if entry.kind == "group":
            items = items[entry.start : entry.stop]
        elif len(items) > CHILDREN_SHOWN_MAX:
            self._add_groups(node, entry.path, items)
            return
        for key, child in items:
            child_path = (*entry.path, key)
            node.add(
                self._label(key, child, child_path), data=Entry(child_path), allow_expand=is_container(child)
            )

    def _add_groups(self, node: TreeNode[Entry], path: Path, items: list[tuple[Any, Any]]) -> None:
        for start in range(0, len(items), CHILDREN_SHOWN_MAX):
            stop = min(start + CHILDREN_SHOWN_MAX, len(items))
            label = Text(f"{items[start][0]} … {items[stop - 1][0]} ({stop - start})", self._style("summary"))
            node.add(label, data=Entry(path, "group", start, stop), allow_expand=True)

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"inspector--{name}", partial=True)

    def _label(self, key: Any, value: Any, path: Path) -> Text:
        summary, alarm = describe(value)
        label = Text()
        changed = self._is_highlighted(path)
        if changed:
            label.append("● ", self._style("changed"))
        label.append(str(key), self._style("changed") if changed else self._style("key"))
        label.append(" ")
        if alarm:  # right after the dtype, where a narrow pane still shows it
            head, _, rest = summary.partition(" ")
            label.append(head + " ", self._style("summary"))
            label.append(alarm, self._style("alarm"))
            label.append(" " + rest if rest else "", self._style("summary"))
        else:
            label.append(summary, self._style("summary"))
        return label

    def _is_highlighted(self, path: Path) -> bool:
        if not self.highlight_paths:
            return False
        text = path_text(path)
        return any(marked == text or marked.startswith(text + "/") for marked in self.highlight_paths)

    # -- expansion ------------------------------------------------------------------------------

    def _on_tree_node_expanded(self, event: Tree.NodeExpanded[Entry]) -> None:
        self._load(event.node)
        self._remember(event.node)

    def _on_tree_node_collapsed(self, event: Tree.NodeCollapsed[Entry]) -> None:
        entry = event.node.data
        if entry is not None and entry.kind == "value" and entry.path in self._expanded:
            self._expanded.remove(entry.path)

    def _on_tree_node_selected(self, event: Tree.NodeSelected[Entry]) -> None:
        event.stop()
        entry = event.node.data
        if entry is not None and entry.kind == "value":
            self.post_message(self.PathChosen(self, path_text(entry.path)))

    def _find_child(self, node: TreeNode[Entry], key: Any) -> TreeNode[Entry] | None:
        self._load(node)
        groups = [child for child in node.children if child.data is not None and child.data.kind == "group"]
        if groups:
            position = self._position_of(node, key)
            for group in groups:
                assert group.data is not None
                if position is not None and group.data.start <= position < group.data.stop:
                    group.expand()
                    return self._find_child(group, key)
            return None
        for child in node.children:
            entry = child.data
            if entry is not None and entry.kind == "value" and entry.path and str(entry.path[-1]) == str(key):
                return child
        return None

    def _position_of(self, node: TreeNode[Entry], key: Any) -> int | None:
        """Where ``key`` sits among the children of the value at ``node`` (dict order or list index)."""
        assert node.data is not None
        value = lookup(self.document, node.data.path)
        if isinstance(value, dict):
            for position, candidate in enumerate(value):
                if str(candidate) == str(key):
                    return position
            return None
        if isinstance(value, (list, tuple)) and str(key).isdigit() and int(key) < len(value):
            return int(key)
        return None

    def _open(self, path: Sequence[Any], *, select: bool) -> TreeNode[Entry] | None:
        node = self.root
        for key in path:
            child = self._find_child(node, key)
            if child is None:
                return None
            if node is not self.root:
                node.expand()
                self._remember(node)
            node = child
        if select:
            _ = self.last_line  # lays out the lines, so that the node knows its line
            self.move_cursor(node)
        return node

    def _remember(self, node: TreeNode[Entry]) -> None:
        entry = node.data
        self._load(node)
        if entry is not None and entry.kind == "value" and entry.path and entry.path not in self._expanded:
            self._expanded.append(entry.path)
            del self._expanded[:-EXPANDED_PATHS_MAX]

    def show_path(self, path: str | Iterable[Any], *, expand: bool = True) -> bool:
        """Open the tree down to ``path`` and put the cursor on it; False when it does not exist."""
        keys = split_path(path) if isinstance(path, str) else list(path)
        node = self._open(keys, select=True)
        if node is None:
            return False
        if expand and node.allow_expand:
            node.expand()
            self._remember(node)
        self.scroll_to_node(node, animate=False)
        return True

    @property
    def cursor_path(self) -> str | None:
        """The slash-separated path under the cursor."""
        node = self.cursor_node
        if node is None or node.data is None or node.data.kind != "value":
            return None
        return path_text(node.data.path)

    def visible_labels(self) -> list[str]:
        """The labels of the tree's lines, top to bottom (what a user sees, as plain text)."""
        labels = []
        for line in range(self.last_line + 1):
            node = self.get_node_at_line(line)
            if node is not None:
                labels.append(str(node.label))
        return labels
