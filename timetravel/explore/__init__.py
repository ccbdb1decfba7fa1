"""Explore: turn a recording into answers (seek, branch, compare, diff, search, minimize).

The command language in :mod:`timetravel.explore.commands` is what every front end calls.
:class:`Session` (in :mod:`timetravel.explore.session`) is the open recording those commands run
against: ``Session.open(path)``, ``goto``, ``step``, ``back``; the actions over it (branch, fanout,
compare, diff, search, minimize, export, replay) are functions in their modules that take a
Session (explore/session.py's docstring lists them).
"""

from timetravel.explore.replay import Mismatch, ReplayDivergence
from timetravel.explore.session import Session
from timetravel.explore.session_data import Position, RecordedEvent, RecordingInfo, SnapshotInfo
from timetravel.explore.verify_replay import ReplayReport

__all__ = [
    "Mismatch",
    "Position",
    "RecordedEvent",
    "RecordingInfo",
    "ReplayDivergence",
    "ReplayReport",
    "Session",
    "SnapshotInfo",
]
