"""The TUI's screens: the debugger's main screen, the comparison and its diff, the key map."""

from timetravel.tui.screens.compare_screen import CompareScreen, DiffScreen
from timetravel.tui.screens.main_screen import PANES, MainScreen

__all__ = ["PANES", "CompareScreen", "DiffScreen", "MainScreen"]
