"""What a Session answers with, and how it reads a recording's branches — plain functions of the
reader, kept apart from :class:`~timetravel.explore.session.Session` so that modules which only need
a branch's lineage or a record type (the TUI's indexes, divergence, tracks) do not import the Session.

* the records: :class:`Position`, :class:`SnapshotInfo`, :class:`RecordedEvent`, :class:`RecordingInfo`;
* :func:`load_scenario`: a recording's scenario, by name or by the user's explicit ``--scenario``;
* :func:`lineage`: the snapshots and event batches a branch sees (its parent's up to the fork);
* :func:`overrides_from`: a header's or branch's choice overrides, untrusted data checked entry by entry;
* :func:`rule_kept`: whether the recording says its handlers kept to their own nodes (shared seeks).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from timetravel.recording.catalog import MAIN_BRANCH, EventBatchInfo, ManifestInfo
from timetravel.recording.format import RecordingError
from timetravel.recording.reader import RecordingReader
from timetravel.recording.recorder import COPY_ON_WRITE_NOTE
from timetravel.scenarios import UnknownScenarioError, get_scenario, load_target
from timetravel.sim.choices import Overrides
from timetravel.sim.scenario import Scenario


@dataclass(frozen=True)
class Position:
    branch: str
    events: int
    t_ns: int


@dataclass(frozen=True)
class SnapshotInfo:
    index: int
    events: int
    t_ns: int
    state_hash: str
    final: bool = False
    """Taken after the run ended (end-of-run checks done), not at a pause."""


@dataclass(frozen=True)
class RecordedEvent:
    number: int
    t_ns: int
    seq: int
    node: str
    kind: str
    payload: Any


@dataclass(frozen=True)
class RecordingInfo:
    path: str
    scenario: str
    config: dict[str, Any]
    seed: int
    display_unit: str
    timetravel_version: str
    format: list[int]
    code_fingerprint: str
    platform_fingerprint: str
    snapshot_every_events: int
    events: int
    t_end_ns: int
    outcome: str | None
    failure: dict[str, Any] | None
    complete: bool
    loss: list[str] = field(default_factory=list)
    in_progress: bool = False
    """A live recorder is still writing this branch (recording/lock.py): no outcome yet, and
    ``events``/``t_end_ns`` are where it has got to, not where the run ends."""

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def load_scenario(name: str, target: str | None, recorded_module: str | None = None) -> Scenario:
    """The scenario for a recording: ``target`` (the user's explicit opt-in) or by registered name."""
    if target:
        scenario = load_target(target)
        if scenario.name != name:
            raise UnknownScenarioError(
                f"the recording is of scenario {name!r}; {target} is {scenario.name!r}"
            )
        return scenario
    try:
        return get_scenario(name)
    except UnknownScenarioError:
        hint = f" (it was recorded from module {recorded_module!r}, which is not imported automatically)"
        raise UnknownScenarioError(
            f"scenario {name!r} of this recording is neither built in nor installed; "
            f"pass --scenario MODULE:ATTR to load its code{hint if recorded_module else ''}"
        ) from None


BRANCH_DEPTH_MAX = 64
"""Bound on branches of branches followed back to the recorded run."""


def lineage(
    reader: RecordingReader, branch: str, depth: int = 0
) -> tuple[list[ManifestInfo], list[EventBatchInfo], int]:
    """The snapshots and event batches a branch sees, and the event number it forked at (0: main).

    A branch shares its parent's history up to the fork: the parent's snapshots before the fork
    and the parent's full event batches that end at or before it, then the branch's own frames
    (which start with a snapshot at the fork; its first batch holds the batch that was open
    there, so it replaces the parent's batch with the same first event).
    """
    info = reader.catalog.branches.get(branch)
    if branch == MAIN_BRANCH or info is None:
        return reader.manifests(branch), reader.event_batches(branch), 0
    if depth >= BRANCH_DEPTH_MAX:
        raise RecordingError(
            f"{reader.path}: branch {branch!r} descends from more than {BRANCH_DEPTH_MAX} branches"
        )
    parent = info.get("parent", MAIN_BRANCH)
    fork = info.get("at_events")
    if not isinstance(parent, str) or not isinstance(fork, int) or parent == branch:
        raise RecordingError(f"{reader.path}: branch {branch!r} has a malformed parent or fork point")
    parent_manifests, parent_batches, _ = lineage(reader, parent, depth + 1)
    own_batches = reader.event_batches(branch)
    own_firsts = {batch.first for batch in own_batches}
    manifests = [m for m in parent_manifests if m.events < fork and not m.final] + reader.manifests(branch)
    batches = [b for b in parent_batches if b.first + b.count <= fork and b.first not in own_firsts]
    return manifests, sorted(batches + own_batches, key=lambda batch: batch.first), fork


def rule_kept(reader: RecordingReader, branch: str) -> bool:
    """Whether the recording says its handlers kept to their own nodes: the branch and the main run
    ended (the recorder checks the rule at the end) and no note says the check failed."""
    catalog = reader.catalog
    if reader.end(branch) is None or reader.end(MAIN_BRANCH) is None or catalog.notes_dropped:
        return False
    return not any(str(note.get("message", "")).startswith(COPY_ON_WRITE_NOTE) for note in catalog.notes)


def overrides_from(entries: Any) -> Overrides:
    overrides: Overrides = {}
    if not isinstance(entries, list):
        return overrides
    for entry in entries:
        if isinstance(entry, list) and len(entry) == 4:
            node, site, index, value = entry
            if (
                isinstance(node, str)
                and isinstance(site, str)
                and isinstance(index, int)
                and isinstance(value, int)
            ):
                overrides[(node, site, index)] = value
    return overrides


__all__ = [
    "BRANCH_DEPTH_MAX",
    "Position",
    "RecordedEvent",
    "RecordingInfo",
    "SnapshotInfo",
    "lineage",
    "load_scenario",
    "overrides_from",
    "rule_kept",
]
