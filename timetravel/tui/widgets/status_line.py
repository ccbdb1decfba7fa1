"""StatusLine: the last command's answer (or error) and the progress of long work.

One line above the command line. ``say(text)`` shows an answer, ``error(text)`` shows it in red;
while a long command runs (a branch, a fan-out, a divergence search, a minimization), ``busy``
shows its progress bar with ``esc cancels`` beside it. The line owns no work: the App's worker
reports progress into it.
"""

from __future__ import annotations

from textual.app import ComposeResult
from textual.widget import Widget
from textual.widgets import ProgressBar, Static

from timetravel.tui.css import css_beside
from timetravel.tui.safe_lines import SafeStatic


class StatusLine(Widget):
    """Answer or error on the left, progress on the right. See the module docstring."""

    DEFAULT_CSS = css_beside(__file__)

    def __init__(self, *, name: str | None = None, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(name=name, id=id, classes=classes)
        self.text = ""

    def compose(self) -> ComposeResult:
        yield SafeStatic("", id="status-text", markup=False)
        yield ProgressBar(total=1.0, show_eta=False, id="status-progress")

    def _show(self, text: str) -> None:
        self.text = text
        # one line of fixed size: no layout pass (a layout pass repaints the whole screen)
        self.query_one("#status-text", Static).update(text.replace("\n", " ⏎ "), layout=False)

    def say(self, text: str) -> None:
        """Show an answer."""
        self.remove_class("-error")
        self._show(text)

    def error(self, text: str) -> None:
        """Show an error (bad command, failed seek)."""
        self.add_class("-error")
        self._show(text)

    def busy(self, label: str, fraction: float | None) -> None:
        """Show long work ``label`` at ``fraction`` done (None: unknown), cancellable with esc."""
        self.add_class("-busy")
        self.remove_class("-error")
        bar = self.query_one("#status-progress", ProgressBar)
        bar.update(total=None if fraction is None else 1.0, progress=fraction or 0.0)
        self._show(f"{label} · esc cancels")

    def idle(self) -> None:
        """Hide the progress bar."""
        self.remove_class("-busy")

    @property
    def is_busy(self) -> bool:
        return self.has_class("-busy")
