"""BranchTree: the recorded run and every future branched from it — which futures pass, and from where?

``main`` is the root; each branch hangs under the run it was branched from, labelled with the
time it forked at, its outcome (``✔ pass``, ``✖ fail`` with the failure, ``… running 40%``) and
what it changed (``drop f3``). The run the cursor is in is underlined.

Space picks a branch for comparison (two at most; a third pick replaces the oldest), ``c``
posts :class:`BranchTree.CompareRequested` with the two picks (or the highlighted branch and
``main`` when fewer are picked), enter posts :class:`BranchTree.BranchChosen` (switch to it).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from rich.style import Style
from rich.text import Text
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Tree
from textual.widgets.tree import TreeNode

from timetravel.tui.css import component_classes, css_beside
from timetravel.tui.model import BranchInfo
from timetravel.tui.safe_lines import TerminalSafeLines
from timetravel.tui.timefmt import exact_time

PICKS_MAX = 2
ROOT_BRANCH = "main"
OUTCOME_GLYPHS = {"pass": "✔", "fail": "✖", "running": "…", "cancelled": "⊘", "unknown": "?"}


class BranchTree(TerminalSafeLines, Tree[str]):
    """The tree of runs and branches. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)
    COMPONENT_CLASSES: ClassVar[set[str]] = component_classes(
        "branch-tree", "pass", "fail", "running", "muted", "picked", "current"
    )
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "pick", "pick", tooltip="pick the branch for comparison (two at most)"),
        Binding(
            "c",
            "compare",
            "compare",
            tooltip="compare the two picked branches (or the highlighted one with main)",
        ),
    ]

    branches: reactive[tuple[BranchInfo, ...]] = reactive(())
    picked: reactive[tuple[str, ...]] = reactive(())
    current: reactive[str] = reactive(ROOT_BRANCH)
    unit: reactive[str] = reactive("ms")

    class BranchChosen(Message):
        """The user chose branch ``name``: show it."""

        def __init__(self, tree: BranchTree, name: str) -> None:
            super().__init__()
            self.branch_tree = tree
            self.name = name

        @property
        def control(self) -> BranchTree:
            return self.branch_tree

    class CompareRequested(Message):
        """The user asked to compare branches ``a`` and ``b``."""

        def __init__(self, tree: BranchTree, a: str, b: str) -> None:
            super().__init__()
            self.branch_tree = tree
            self.a = a
            self.b = b

        @property
        def control(self) -> BranchTree:
            return self.branch_tree

    def __init__(
        self,
        branches: Sequence[BranchInfo] = (),
        *,
        unit: str = "ms",
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
    ) -> None:
        super().__init__("runs", name=name, id=id, classes=classes)
        self.show_root = False
        self.auto_expand = False
        self.border_title = "branches"
        self.set_reactive(BranchTree.unit, unit)
        self.set_reactive(BranchTree.branches, tuple(branches))

    def on_mount(self) -> None:
        self._rebuild()

    def watch_branches(self) -> None:
        if self.is_mounted:
            self._rebuild()

    def watch_picked(self) -> None:
        if self.is_mounted:
            self._rebuild()
        self.border_subtitle = ("compare " + " vs ".join(self.picked)) if self.picked else "space: pick two"

    def watch_current(self) -> None:
        if self.is_mounted:
            self._rebuild()

    # -- building -------------------------------------------------------------------------------

    def _style(self, name: str) -> Style:
        return self.get_component_rich_style(f"branch-tree--{name}", partial=True)

    def label_for(self, branch: BranchInfo) -> Text:
        """A branch's line: name, fork time, outcome and what it changed."""
        label = Text()
        if branch.name in self.picked:
            label.append(f"[{self.picked.index(branch.name) + 1}]", self._style("picked"))
            label.append(" ")
        label.append(branch.name, self._style("current") if branch.name == self.current else Style())
        if branch.at_ns is not None:
            label.append(f" @{exact_time(branch.at_ns, self.unit)}", self._style("muted"))
        outcome = branch.outcome
        style = self._style(outcome if outcome in ("pass", "fail", "running") else "muted")
        text = f" {OUTCOME_GLYPHS[outcome]} {outcome}"
        if outcome == "running" and branch.progress is not None:
            text += f" {branch.progress:.0%}"
        label.append(text, style)
        if branch.failure:
            label.append(f" {branch.failure}", self._style("fail"))
        if branch.changes:
            label.append(f" · {branch.changes}", self._style("muted"))
        return label

    def _rebuild(self) -> None:
        cursor = self.cursor_node
        cursor_name = cursor.data if cursor is not None else None
        self.clear()
        known = {branch.name for branch in self.branches}
        nodes: dict[str, TreeNode[str]] = {}
        pending = list(self.branches)
        while pending:
            remaining = []
            for branch in pending:
                parent = branch.parent if branch.parent in known else None
                if parent is not None and parent not in nodes:
                    remaining.append(branch)
                    continue
                anchor = nodes[parent] if parent is not None else self.root
                nodes[branch.name] = anchor.add(self.label_for(branch), data=branch.name, expand=True)
            if len(remaining) == len(pending):
                for branch in remaining:
                    nodes[branch.name] = self.root.add(self.label_for(branch), data=branch.name, expand=True)
                break
            pending = remaining
        self.root.expand()
        _ = self.last_line
        if cursor_name in nodes:
            self.move_cursor(nodes[cursor_name])
        elif nodes:
            self.move_cursor(next(iter(nodes.values())))

    # -- actions --------------------------------------------------------------------------------

    @property
    def highlighted(self) -> str | None:
        node = self.cursor_node
        return node.data if node is not None else None

    def action_pick(self) -> None:
        name = self.highlighted
        if name is None:
            return
        if name in self.picked:
            self.picked = tuple(item for item in self.picked if item != name)
        else:
            self.picked = (*self.picked, name)[-PICKS_MAX:]

    def action_compare(self) -> None:
        if len(self.picked) == PICKS_MAX:
            a, b = self.picked
        else:
            other = self.picked[0] if self.picked else self.highlighted
            if other is None or other == ROOT_BRANCH:
                self.notify("pick two branches with space, then press c", severity="warning")
                return
            a, b = ROOT_BRANCH, other
        self.post_message(self.CompareRequested(self, a, b))

    def _on_tree_node_selected(self, event: Tree.NodeSelected[str]) -> None:
        event.stop()
        if event.node.data is not None:
            self.post_message(self.BranchChosen(self, event.node.data))
