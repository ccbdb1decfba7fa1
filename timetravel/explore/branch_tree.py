"""The branch tree of a recording: ``main`` (the recorded run) and every branch stored in it.

A branch is a BRANCH frame (name, parent, fork point, the changes it made) followed by its own
snapshots, events and an END frame, all in the same file (docs/recording-format.md). The tree is
read from the catalog alone — no state is restored — so listing it is instant however big the
recording. A branch without an END frame (a run that was stopped, or is still being written)
has the outcome ``unknown``.
"""

from __future__ import annotations

from typing import Any

from timetravel.explore.results import BranchResult
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.recording.reader import RecordingReader

OUTCOME_UNKNOWN = "unknown"
OUTCOME_IN_PROGRESS = "in progress"
"""A branch with no END frame whose recorder is still writing it (recording/lock.py); a branch
with no END and no live writer is ``unknown`` (the file is incomplete)."""
CHANGE_TEXT_CHARS_MAX = 120


def branch_names(reader: RecordingReader) -> list[str]:
    """``main`` first, then the branches in the order they were written."""
    return [MAIN_BRANCH, *(name for name in reader.catalog.branches if name != MAIN_BRANCH)]


def change_texts(changes: Any) -> tuple[str, ...]:
    """A BRANCH frame's ``changes`` as short texts (``branch_key=1``, ``drop_fault=['f2']``)."""
    if isinstance(changes, dict):
        texts = [f"{key}={value}" for key, value in changes.items()]
    elif isinstance(changes, (list, tuple)):
        texts = [str(change) for change in changes]
    elif changes:
        texts = [str(changes)]
    else:
        texts = []
    return tuple(
        text if len(text) <= CHANGE_TEXT_CHARS_MAX else text[: CHANGE_TEXT_CHARS_MAX - 3] + "..."
        for text in texts
    )


def branch_result(reader: RecordingReader, name: str) -> BranchResult:
    """One row of the tree; ``main`` has the parent ``""`` and forks at 0."""
    end = reader.end(name) or {}
    outcome = str(end.get("outcome") or OUTCOME_UNKNOWN)
    if reader.branch_in_progress(name):
        outcome = OUTCOME_IN_PROGRESS
    failure = end.get("failure")
    changes: tuple[str, ...] = ()
    if name == MAIN_BRANCH:
        parent, at_ns = "", 0
    else:
        info = reader.catalog.branches[name]
        parent = str(info.get("parent", MAIN_BRANCH))
        at_ns = int(info.get("at_ns", 0) or 0)
        changes = change_texts(info.get("changes"))
    return BranchResult(
        name=name,
        parent=parent,
        at_ns=at_ns,
        outcome=outcome,
        failure=dict(failure) if isinstance(failure, dict) else None,
        changes=changes,
        t_end_ns=int(end.get("t_end_ns", 0) or 0),
        events=int(end.get("events", 0) or 0),
    )


def branch_tree(reader: RecordingReader) -> tuple[BranchResult, ...]:
    """Every branch of the recording, ``main`` first."""
    return tuple(branch_result(reader, name) for name in branch_names(reader))
