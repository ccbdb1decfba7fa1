"""Explore: turn a recording into answers (seek, branch, compare, diff, search, minimize).

The command language in :mod:`timetravel.explore.commands` is what every front end calls.
:class:`Session` (in :mod:`timetravel.explore.session`) is the open recording those commands run
against: ``Session.open(path)``, ``goto``, ``step``, ``back``, ``replay``.
"""

from timetravel.explore.replay import Mismatch, ReplayDivergence
from timetravel.explore.session import (
    Position,
    RecordedEvent,
    RecordingInfo,
    ReplayReport,
    Session,
    SnapshotInfo,
)

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
