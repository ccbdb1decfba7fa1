"""Branch: an alternate future of a recorded run from time T, stored in the same recording.

``branch(session, at, changes)`` seeks the parent branch (the session's, or ``parent``) to
``at`` (the state after every event with time <= T, or ``#N``), copies that world, applies the
changes, and runs it to the end or a failure while recording it into the same file:

* ``branch_key``: a new branch key. Every choice drawn after the fork comes from streams keyed by
  (seed, branch key, node, site), so the future's jitter, orderings and random fault hits are new
  while everything before T stays as recorded. Choices the parent pinned (a repro's overrides)
  stay pinned.
* ``drop_faults``, ``add_faults``, ``edit_faults``: fault records (:mod:`.fault_changes`).
* ``settings``: ``key=value`` for config keys the scenario marks ``branchable`` (``bug=none``,
  ``reduce_order=arrival``); other keys would contradict the world already built, and are refused.

**Storage.** A BRANCH frame (``name``, ``parent``, ``at_events``, ``at_ns``, ``changes`` as short
texts, ``request`` as data, ``overrides``, ``branch_key``) is appended, then the future is
recorded as the branch's own frames (a snapshot at the fork after the changes, event batches,
snapshots on the parent's interval, FAILURE and END), sharing every blob of the prefix by
digest. Branches are named ``b1``, ``b2``, … (never reused) unless named; the recorded run is
``main``. A branch of a branch works the same way.

**Bounds.** The future runs the way the parent ended (until the same time when the parent was
run ``--until``), for at most RUN_EVENTS_FACTOR times the parent's events (plus a slack): past
that it ends ``unfinished``. ``should_stop`` cancels between chunks; what was recorded stays
readable, without an END frame (outcome ``cancelled``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from timetravel.explore.fault_changes import (
    add_fault,
    change_fault,
    describe_fault,
    drop_fault,
    parse_fault_edit,
    parse_fault_spec,
)
from timetravel.explore.results import BranchResult
from timetravel.explore.session import Session
from timetravel.explore.tracks import branch_info, new_branch_name, open_track, overrides_of
from timetravel.explore.work import (
    OUTCOME_CANCELLED,
    ExploreError,
    ProgressCallback,
    StopCheck,
    WorkProgress,
    events_bound,
    outcome_of,
    run_bounded,
)
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.recording.format import FrameType
from timetravel.recording.recorder import Recorder
from timetravel.recording.writer import RecordingWriter
from timetravel.sim.choices import Overrides
from timetravel.sim.kernel import CHAIN_BATCH_EVENTS_DEFAULT
from timetravel.sim.scenario import Scenario
from timetravel.sim.timefmt import format_time
from timetravel.sim.world import World

BRANCH_KEY_MAX = (1 << 64) - 1
CHANGES_MAX = 1_000
"""Fault changes and settings one branch may make."""


@dataclass(frozen=True)
class BranchChanges:
    """What a branch changes at its fork. Fault specs and edits are text (see fault_changes.py)
    or already-parsed data: a record dict for ``add_faults``, ``(id, changes)`` for ``edit_faults``."""

    branch_key: int | None = None
    drop_faults: tuple[str, ...] = ()
    add_faults: tuple[str | Mapping[str, Any], ...] = ()
    edit_faults: tuple[str | tuple[str, Mapping[str, Any]], ...] = ()
    settings: tuple[str, ...] = ()
    """``key=value`` texts, or use ``config`` for typed values."""
    config: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, changes: BranchChanges | Mapping[str, Any] | None) -> BranchChanges:
        """Accept a BranchChanges or a mapping with the same keys (``{"branch_key": 3}``)."""
        if changes is None:
            return cls()
        if isinstance(changes, BranchChanges):
            return changes
        unknown = [key for key in changes if key not in cls.__dataclass_fields__]
        if unknown:
            raise ExploreError(
                f"unknown branch change {unknown[0]!r} (known: {', '.join(cls.__dataclass_fields__)})"
            )
        values: dict[str, Any] = {
            key: tuple(value) if isinstance(value, list) else value for key, value in changes.items()
        }
        return cls(**values)

    @property
    def empty(self) -> bool:
        return self.branch_key is None and not (
            self.drop_faults or self.add_faults or self.edit_faults or self.settings or self.config
        )

    def count(self) -> int:
        return (
            len(self.drop_faults)
            + len(self.add_faults)
            + len(self.edit_faults)
            + len(self.settings)
            + len(self.config)
        )


@dataclass
class AppliedChanges:
    """What applying BranchChanges did: short texts for people, data for the BRANCH frame."""

    texts: list[str] = field(default_factory=list)
    request: dict[str, Any] = field(default_factory=dict)


def apply_changes(
    world: World, scenario: Scenario, changes: BranchChanges, display_unit: str
) -> AppliedChanges:
    """Apply ``changes`` to a forked world (in place). Raises ExploreError, ConfigError."""
    if changes.count() > CHANGES_MAX:
        raise ExploreError(f"a branch makes at most {CHANGES_MAX} changes")
    applied = AppliedChanges()
    request = applied.request
    if changes.branch_key is not None:
        key = changes.branch_key
        if type(key) is not int or not 0 <= key <= BRANCH_KEY_MAX:
            raise ExploreError(f"--branch-seed must be an integer in [0, 2**64), got {key!r}")
        world.branch_key = key
        applied.texts.append(f"branch-seed {key}")
        request["branch_key"] = key
    for fault_id in changes.drop_faults:
        drop_fault(world, fault_id)
        applied.texts.append(f"drop-fault {fault_id}")
        request.setdefault("drop_faults", []).append(fault_id)
    for edit in changes.edit_faults:
        fault_id, fields = parse_fault_edit(edit, display_unit) if isinstance(edit, str) else edit
        record = change_fault(world, fault_id, fields)
        applied.texts.append(f"edit-fault {describe_fault(record)}")
        request.setdefault("edit_faults", []).append([fault_id, dict(fields)])
    for spec in changes.add_faults:
        item = parse_fault_spec(spec, display_unit) if isinstance(spec, str) else dict(spec)
        record = add_fault(world, item)
        applied.texts.append(f"add-fault {describe_fault(record)}")
        request.setdefault("add_faults", []).append(dict(record))
    settings = dict(_parse_settings(scenario, changes.settings))
    settings.update({name: scenario.param(name).check(value) for name, value in changes.config.items()})
    for name, value in settings.items():
        _check_branchable(scenario, name)
        world.config = {**world.config, name: value}
        applied.texts.append(f"set {name}={value}")
        request.setdefault("settings", {})[name] = value
    return applied


def _parse_settings(scenario: Scenario, settings: Iterable[str]) -> Iterable[tuple[str, Any]]:
    for setting in settings:
        name, equals, text = setting.partition("=")
        if not equals or not name.strip():
            raise ExploreError(f"--set expects key=value, got {setting!r}")
        yield name.strip(), scenario.param(name.strip()).parse(text)


def _check_branchable(scenario: Scenario, name: str) -> None:
    if not scenario.param(name).branchable:
        branchable = [param.name for param in scenario.params if param.branchable]
        raise ExploreError(
            f"config key {name!r} of scenario {scenario.name} cannot change in a branch "
            f"(branchable: {', '.join(branchable) or 'none'}); use `rerun --set` to run from the start"
        )


def resolve_at(session: Session, at: int | str | None) -> None:
    """Move ``session``'s cursor to the fork point (None: where it is) and check a future can start there."""
    if at is not None:
        session.goto(at)
    world = session.world
    unit = session.display_unit
    if world.failures:
        failure = world.failures[0]
        raise ExploreError(
            f"{session.branch} has already failed there ({failure['signature']} at "
            f"{format_time(failure['t_ns'], unit)}): branch from an earlier time"
        )
    if world.events_processed >= session.end.events:
        raise ExploreError(
            f"{format_time(world.t_ns, unit)} is at or past the end of {session.branch} "
            f"({format_time(session.end.t_ns, unit)}): branch from an earlier time"
        )


def fork_track(session: Session, at: int | str | None, parent: str | None) -> Session:
    """The parent branch positioned at the fork point. ``at`` None is ``session``'s cursor: then the
    session itself is the track (its world is copied, never changed)."""
    if at is None and parent in (None, session.branch):
        resolve_at(session, None)
        return session
    track = open_track(session, parent or session.branch)
    resolve_at(track, session.world.t_ns if at is None else at)
    return track


def fork(
    session: Session, at: int | str | None, changes: BranchChanges, parent: str | None = None
) -> tuple[Session, World, AppliedChanges]:
    """The parent's track, a copy of its world at ``at`` with ``changes`` applied, and what changed."""
    track = fork_track(session, at, parent)
    world = track.world_copy()
    applied = apply_changes(world, session.scenario, changes, session.display_unit)
    return track, world, applied


def branch(
    session: Session,
    at: int | str | None,
    changes: BranchChanges | Mapping[str, Any] | None = None,
    *,
    name: str | None = None,
    parent: str | None = None,
    progress: ProgressCallback | None = None,
    should_stop: StopCheck | None = None,
) -> BranchResult:
    """Run and store one alternate future (see the module docstring); ``at`` None: the cursor."""
    wanted = BranchChanges.of(changes)
    if wanted.empty:
        raise ExploreError(
            "a branch needs a change: --branch-seed, --drop-fault, --add-fault, --edit-fault or --set"
        )
    track, world, applied = fork(session, at, wanted, parent)
    reader = session.reader
    label = new_branch_name(reader, name)
    if int(reader.header.get("chain_batch_events", CHAIN_BATCH_EVENTS_DEFAULT)) != CHAIN_BATCH_EVENTS_DEFAULT:
        raise ExploreError("this recording uses a custom chain batch size; branches need the default")
    overrides = overrides_of(reader, track.branch, world.events_processed)
    result = _record(session, track, world, label, applied, overrides, progress, should_stop)
    reload = getattr(session, "reload", None)
    if callable(reload):
        reload()
    return result


def _record(
    session: Session,
    track: Session,
    world: World,
    label: str,
    applied: AppliedChanges,
    overrides: Overrides,
    progress: ProgressCallback | None,
    should_stop: StopCheck | None,
) -> BranchResult:
    fork_events, at_ns = world.events_processed, world.t_ns
    recorder = _branch_recorder(session, track, world, label, applied, overrides)
    parent_end = track.end
    events_max = events_bound(parent_end.events)
    until_ns = parent_end.t_ns if (session.reader.end(track.branch) or {}).get("stop") == "until" else None
    total = max(parent_end.events - fork_events, 1)

    def report(events: int) -> None:
        if progress is not None:
            progress(WorkProgress(f"branch {label}", events - fork_events, total))

    try:
        result = run_bounded(
            recorder.run,
            world,
            until_ns=until_ns,
            events_max=events_max,
            should_stop=should_stop,
            on_chunk=report,
        )
    except BaseException:
        recorder.abort()
        raise
    if result is None:
        recorder.abort()
        return BranchResult(
            label,
            track.branch,
            at_ns,
            OUTCOME_CANCELLED,
            None,
            tuple(applied.texts),
            world.t_ns,
            world.events_processed,
        )
    outcome = outcome_of(result, events_max)
    end = recorder.finish(dataclasses.replace(result, outcome=outcome))
    return BranchResult(
        name=label,
        parent=track.branch,
        at_ns=at_ns,
        outcome=outcome,
        failure=end["failure"],
        changes=tuple(applied.texts),
        t_end_ns=end["t_end_ns"],
        events=end["events"],
    )


def _branch_recorder(
    session: Session, track: Session, world: World, label: str, applied: AppliedChanges, overrides: Overrides
) -> Recorder:
    """Append the BRANCH frame of ``label`` (forked from ``track`` where ``world`` stands) and the
    Recorder that runs its future into the same file."""
    reader = session.reader
    writer = RecordingWriter.append(reader.path)
    writer.frame(
        FrameType.BRANCH,
        {
            "name": label,
            "parent": track.branch,
            "at_events": world.events_processed,
            "at_ns": world.t_ns,
            "changes": applied.texts,
            "request": applied.request,
            "overrides": [[node, site, index, value] for (node, site, index), value in overrides.items()],
            "branch_key": world.branch_key,
        },
    )
    return Recorder(
        session.scenario,
        world,
        reader.path,
        snapshot_every_events=int(reader.header.get("snapshot_every_events", 0)) or 8192,
        overrides=overrides or None,
        record_choices=bool(reader.catalog.choices.get(MAIN_BRANCH)),
        branch=label,
        writer=writer,
        determinism=session.determinism,
        simulation_factory=track.simulation,
    )


def stored_changes(session: Session, name: str) -> tuple[str, ...]:
    """The change texts a stored branch was made with."""
    changes = branch_info(session.reader, name).get("changes", [])
    return tuple(str(change) for change in changes) if isinstance(changes, list) else ()
