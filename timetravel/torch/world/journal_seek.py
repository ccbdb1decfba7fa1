"""Which JOURNAL frames re-execute a Session's recorded events, and the replayed host that reads them
(coordinator side; journal.py holds the journal itself, world_source.py asks here on every seek).
"""

from __future__ import annotations

from typing import Any

from timetravel.torch.world.journal import ReplayedHost


def journal_frames_from(session: Any, events: int) -> tuple[str, list[tuple[int, int]]] | None:
    """The branch whose JOURNAL frames re-execute ``session``'s recorded events after #``events`` (the
    parent's before a fork) and those frames from the one of the batch holding #``events`` on; None
    when a batch from there to that branch's end has no frame (it is re-executed with its ranks)."""
    fork = session.fork_events
    branch = session.branch
    if fork and events < fork:
        branch = session.reader.catalog.branches.get(branch, {}).get("parent", "main")
    catalog = session.reader.catalog
    frames = dict(catalog.journals.get(branch, []))
    if not frames:
        return None
    batches = [b for b in session.event_batches if b.first + b.count > events]
    if fork and events < fork:
        batches = [b for b in batches if b.first < fork]
    if any(b.first not in frames for b in batches):
        return None
    start = max((b.first for b in session.event_batches if b.first <= events), default=0)
    return branch, [(first, offset) for first, offset in catalog.journals[branch] if first >= start]


def replayed_host(session: Any, events: int, launch: Any) -> ReplayedHost | None:
    """The host of a re-execution of ``session``'s recorded events from #``events`` that reads the
    journal instead of running ranks; None when the journal does not cover them."""
    found = journal_frames_from(session, events)
    if found is None:
        return None
    branch, frames = found
    reader = session.reader
    return ReplayedHost(lambda: reader.journal_frames(branch, frames), launch)
