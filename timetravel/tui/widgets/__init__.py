"""The TUI's widgets: one per module, each with its stylesheet in a ``.tcss`` file beside it.

Each widget is fed plain records from ``timetravel.tui.model`` through its attributes and
posts messages when the user asks for something (seek, select a rank, compare two branches);
none of them talks to a Session directly. That keeps every widget testable alone with Pilot.
"""

from timetravel.tui.widgets.branch_tree import BranchTree
from timetravel.tui.widgets.command_line import CommandLine
from timetravel.tui.widgets.compare import CompareView
from timetravel.tui.widgets.event_log import EventLog
from timetravel.tui.widgets.flight_recorder import FlightRecorder
from timetravel.tui.widgets.inspector import StateInspector
from timetravel.tui.widgets.rank_grid import RankGrid
from timetravel.tui.widgets.streams import StreamsView
from timetravel.tui.widgets.timeline import Timeline

__all__ = [
    "BranchTree",
    "CommandLine",
    "CompareView",
    "EventLog",
    "FlightRecorder",
    "RankGrid",
    "StateInspector",
    "StreamsView",
    "Timeline",
]
