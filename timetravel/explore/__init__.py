"""Explore: turn a recording into answers (seek, branch, compare, diff, search, minimize).

The command language in :mod:`timetravel.explore.commands` is what every front end calls.
:class:`Session` (in :mod:`timetravel.explore.session`) is the open recording those commands run
against: ``Session.open(path)``, ``goto``, ``step``, ``back``; the actions over it (branch, fanout,
compare, diff, search, minimize, export, replay) are functions in their modules that take a
Session. Keyword options: ``progress``, ``should_stop``, and each function's own::

    from timetravel.explore.branching import branch
    branch(session, at, changes)           BranchResult: a future stored as b1, b2, ... (``name=``,
                                           ``parent=``); changes: BranchChanges or {"branch_key": 1,
                                           "drop_faults": ["f3"], "add_faults": ["kind=drop,..."],
                                           "edit_faults": ["f3:t_end=990ms"], "settings": ["bug=none"]}
    fanout.fanout(session, at, samples)    FanoutResult: failure rate by signature
    fanout.likelihood(session, samples)    LikelihoodResult: the rate at every snapshot
    compare.compare(session, a, b)         CompareResult: outcomes, metric curves, first divergence
    compare.diff(session, a, b, at=None, path="")              DiffCommandResult
    divergence.first_divergence(session, a, b)                 Divergence | None
    rerun.rerun(session, settings=())      RerunResult: today's code on the recorded inputs
    search.find_first(session, predicate, start_events=0, strategy="auto")   FindResult
    watchpoints.last_change(session, path), .next_change(session, path) FindResult: watchpoints
    minimize_run.minimize_run(session, out=None, pytest=None, budget=Budget())   MinimizeResult
    perfetto.export_perfetto(session, path)                    ExportResult
    verify_replay.replay_session(session, progress=None)       ReplayReport: re-execute and verify
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
