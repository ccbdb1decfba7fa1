"""The branches of an open recording as tracks: their names, ancestry, choice overrides and Sessions.

A recording holds ``main`` and the branches the explore engine appended (BRANCH frames). A branch
owns the events after its fork and shares everything before it with its parent, so the history
of any branch is a list of **segments**: ``[(0, "main"), (1500, "b1"), (4200, "b3")]`` says
events #1..#1500 are main's, #1501..#4200 b1's, the rest b3's. Two branches are identical up to
the first event number at which their segments name different owners: that is where a
divergence search starts (:func:`shared_events`).

:func:`open_track` opens a branch as its own :class:`Session` on the *same* reader, so reading
another branch never moves the caller's cursor and never reopens the file.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from typing import Any

from timetravel.explore.branch_tree import branch_names
from timetravel.explore.session import Session
from timetravel.explore.session_data import BRANCH_DEPTH_MAX, overrides_from
from timetravel.explore.work import ExploreError
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.recording.reader import RecordingReader
from timetravel.sim.choices import Overrides

BRANCH_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,63}$")
AUTO_NAME = re.compile(r"^b([1-9][0-9]{0,8})$")


def check_branch(reader: RecordingReader, name: str) -> str:
    """``name`` if the recording has that branch; otherwise an ExploreError listing them."""
    known = branch_names(reader)
    if name not in known:
        raise ExploreError(f"no branch {name!r} in {reader.path.name} (branches: {', '.join(known)})")
    return name


def new_branch_name(reader: RecordingReader, wanted: str | None = None) -> str:
    """``wanted`` when it is a free, well-formed name; else the next ``bN`` never used."""
    known = branch_names(reader)
    if wanted is not None:
        if not BRANCH_NAME.match(wanted):
            raise ExploreError(
                f"branch name {wanted!r}: use 1-64 letters, digits, '_', '.' or '-' (starting with a letter or digit)"
            )
        if wanted in known:
            raise ExploreError(f"branch {wanted!r} exists already in {reader.path.name}")
        return wanted
    numbers = [int(match.group(1)) for name in known if (match := AUTO_NAME.match(name))]
    return f"b{max(numbers, default=0) + 1}"


def branch_info(reader: RecordingReader, name: str) -> dict[str, Any]:
    """The BRANCH frame of ``name`` (empty for main)."""
    return {} if name == MAIN_BRANCH else dict(reader.catalog.branches.get(name, {}))


def segments(reader: RecordingReader, name: str) -> list[tuple[int, str]]:
    """``[(first event number owned - 1, owner), ...]`` from main to ``name`` (see the module docstring)."""
    chain: list[tuple[int, str]] = []
    current = name
    while current != MAIN_BRANCH:
        if len(chain) >= BRANCH_DEPTH_MAX:
            raise ExploreError(f"branch {name!r} descends from more than {BRANCH_DEPTH_MAX} branches")
        info = branch_info(reader, current)
        fork = info.get("at_events")
        parent = info.get("parent", MAIN_BRANCH)
        if not isinstance(fork, int) or not isinstance(parent, str):
            raise ExploreError(f"branch {current!r} has a malformed fork point")
        chain.append((fork, current))
        current = parent
    chain.append((0, MAIN_BRANCH))
    return list(reversed(chain))


def owner_at(history: list[tuple[int, str]], events: int) -> str:
    """Which branch's recording holds event #``events + 1`` of this history."""
    owner = history[0][1]
    for start, name in history:
        if events >= start:
            owner = name
    return owner


def shared_events(reader: RecordingReader, a: str, b: str) -> int | None:
    """How many events two branches share from the start (None: they are the same history)."""
    history_a, history_b = segments(reader, a), segments(reader, b)
    starts = sorted({start for start, _ in history_a} | {start for start, _ in history_b})
    for start in starts:
        if owner_at(history_a, start) != owner_at(history_b, start):
            return start
    return None


def overrides_of(reader: RecordingReader, name: str, events: int) -> Overrides:
    """The choice overrides in force on branch ``name`` after event #``events``."""
    owner = owner_at(segments(reader, name), events)
    if owner == MAIN_BRANCH:
        return overrides_from(reader.header.get("overrides", []))
    return overrides_from(branch_info(reader, owner).get("overrides", []))


def open_track(session: Session, name: str) -> Session:
    """A Session on branch ``name`` of ``session``'s recording, sharing its reader (never close it:
    closing would close the reader). Its cursor is its own; its world source ends with
    ``session``'s, or sooner with ``session.release_track(track)`` (:func:`track_on`)."""
    check_branch(session.reader, name)
    track = Session(session.reader, session.scenario, name, session.launch)
    session.adopt_track(track)
    return track


@contextlib.contextmanager
def track_on(session: Session, name: str) -> Iterator[Session]:
    """:func:`open_track` for the length of a ``with`` block: its world source (a torch run's
    rank processes and checkpoints) ends at the block's end."""
    track = open_track(session, name)
    try:
        yield track
    finally:
        session.release_track(track)
