"""The Session: one open recording, a cursor in it, and the moves every front end makes.

The TUI, the shell, the CLI and Python scripts all drive this one object (DESIGN.md, principle 6).
This module holds the cursor and what seeking needs; what a branch of the recording says without
re-executing (its events, metrics, failures, snapshots) is explore/recorded_branch.py's, and the
explore engine's actions (branch, fanout, compare, diff, search, minimize, export, replay) are
functions in their own modules that take a Session (the package's docstring lists them).

API::

    session = Session.open("recordings/gossip-7.ttr")          # header + index; scenario by name
    session = Session.open(path, scenario_target="pkg.mod:SCENARIO")   # the user's opt-in to import
    session = Session.open(path, scenario=SCENARIO, branch="b1")      # a Scenario object; a branch
    session.info            RecordingInfo: scenario, config, seed, display_unit, fingerprints,
                            snapshot interval, recorded events, end time, outcome, failure,
                            complete, loss (sentences saying what a truncated file lacks)
    session.position        Position(branch, events, t_ns): the cursor. Event #N is the N-th event
                            processed (1-based); the cursor at #N is the state after it, #0 the
                            initial world. After goto(t) the clock reads t.
    session.world           the World at the cursor (live: it changes when the cursor moves;
                            never mutate it; world_copy() gives an independent copy)
    session.goto(target)    int (ns) or text: "950" (display unit), "950ms", "1.5s", "#1200",
                            "start", "end". goto(t) is the state after every event with time <= t;
                            past the end it stops at the end. Returns the new Position.
    session.goto_time(t_ns), session.goto_event(n), session.step(n=1), session.back(n=1)
    session.end             Position of the recorded end (the final state, end-of-run checks done)
    session.snapshots()     [SnapshotInfo(index, events, t_ns, state_hash, final)] of the branch
    session.event(n)        RecordedEvent #n (from the recording, no re-execution)
    session.events_around(n=None, before=10, after=10)   events near the cursor (or #n)
    session.metric_names(), session.metric_series(name) -> [[t_ns, node, value], ...] (whole run)
    session.failures()      failure records of the branch
    session.state_hash()    hash of the world at the cursor
    session.world_copy()    an independent World at the cursor (plain data: to fork a branch from)
    session.snapshot_world(position), session.overrides_at(n), session.event_batches
                            what re-executing without moving the cursor needs (explore/stepper.py)
    session.fork_events     the event number a branch forked at (0 on main)
    session.close()         (or use ``with Session.open(...) as session``); closes the world source
    session.reload()        read the catalog again after branches were appended (cursor kept)

**The world source** (explore/world_source.py) is the one way to a world: every restore and every
re-execution, here and in every action, goes through these, so that a scenario whose worlds own
external processes (``Scenario.world_source``) plugs in its own and everything else is unchanged::

    session.restore_world(manifest, full_check=False) -> World     a snapshot's world
    session.simulation(world, **options) -> Simulation             re-executes it
    session.source          the WorldSource; a seek starts from the latest snapshot at or before
                            the target that ``source.can_start_at`` accepts

**Branches** (written by the explore engine into the same file: a BRANCH frame, then a Recorder
with ``branch=name`` and ``writer=RecordingWriter.append(path)`` on the forked world) are opened
with ``branch=``: the branch sees its parent's snapshots and event batches before the fork and its
own after it (:func:`lineage`), and re-executes with its own choice overrides.

**Seeking.** ``goto`` restores the latest snapshot at or before the target (or continues from
the cursor when that is closer) and re-executes the events in between. Every chain batch the
re-execution flushes is checked against the recorded hash chain, and the open batch at the
target against the recorded events; a difference raises :class:`ReplayDivergence`, whose
``mismatch`` names the first differing event and classifies it (code changed / platform /
determinism bug). Re-execution never runs past the recorded events, so a truncated recording
seeks within what survives.

**Trust.** Opening never imports code that the recording names: a built-in or installed
(entry-point) scenario loads by name; anything else needs ``scenario_target`` from the user.
"""

from __future__ import annotations

import bisect
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from timetravel.explore import seek_nodes
from timetravel.explore.elided_values import ElidedValues
from timetravel.explore.parked_worlds import ParkedWorlds, quiet_until
from timetravel.explore.recorded_branch import RecordedBranch
from timetravel.explore.replay import (
    ChainVerifier,
    ReplayDivergence,
    classify,
)
from timetravel.explore.seek_gc import gc_paused
from timetravel.explore.session_data import (
    Position,
    RecordedEvent,
    load_scenario,
    overrides_from,
    rule_kept,
)
from timetravel.explore.world_source import RecordedWorlds, WorldSource, world_source_for
from timetravel.recording.catalog import MAIN_BRANCH, ManifestInfo
from timetravel.recording.reader import RecordingReader
from timetravel.scenarios import UnknownScenarioError
from timetravel.sim import guard
from timetravel.sim.choices import Overrides
from timetravel.sim.kernel import Simulation
from timetravel.sim.launch import NO_LAUNCH, Launch
from timetravel.sim.scenario import Scenario
from timetravel.sim.timefmt import parse_time
from timetravel.sim.world import World
from timetravel.snapshot.store import SnapshotStore


class Session(RecordedBranch, ElidedValues, AbstractContextManager["Session"]):
    """A recording opened for seeking. See the module docstring for the API."""

    def __init__(
        self,
        reader: RecordingReader,
        scenario: Scenario,
        branch: str = MAIN_BRANCH,
        launch: Launch = NO_LAUNCH,
    ) -> None:
        super().__init__(reader, branch)
        self.scenario = scenario
        self.launch = launch
        """What the user named for re-executing this recording (``--script``: sim/launch.py); never
        read from the recording. A command sets it once it has checked the script's digest."""
        self.overrides: Overrides = overrides_from(self.header.get("overrides", []))
        self.cause_if_mismatch = classify(self.header, scenario)
        recorded_mode = self.header.get("determinism")
        self.determinism: str | None = recorded_mode if recorded_mode in guard.MODES else None
        """The guard mode the run was recorded under (replays use the same)."""
        self.source: WorldSource = world_source_for(self)
        """Where this session's worlds come from (explore/world_source.py): every restore and every
        re-execution goes through it, so a scenario whose worlds own external processes plugs in
        its own (``Scenario.world_source``) and every action over the Session works unchanged."""
        self._source_open = True
        self._tracks: list[Session] = []
        """Sessions on other branches of this reader (explore/tracks.py): their sources end with ours."""
        self._may_share = rule_kept(reader, branch)
        """Seeks may share decoded node states (explore/seek_nodes.py): the run ended and its
        recorder's copy-on-write check found no handler changing another node's state."""
        self._shared: dict[str, bytes] = {}
        """Nodes of ``world`` whose state is shared with the source's decoded states (never run: a
        seek makes a node private before re-executing events on it), by content digest."""
        self._parked = ParkedWorlds()
        """Worlds the cursor left, to seek back to (explore/parked_worlds.py)."""
        try:
            self.world: World = self._open_world()
        except BaseException:
            self.close_source()
            raise
        self.last_replay_events = 0

    @gc_paused()
    def _open_world(self) -> World:
        """The first snapshot's world, its state hash recomputed (which checks the decoder too); the
        collector paused as in a seek (explore/seek_gc.py: a 10,000-rank first snapshot is ~50,000 new
        containers, and a full collection in the middle cost more than the open).

        Where seeks share decoded node states (``_world_to_replay``'s rule), the cursor starts on
        shared states as it is after any seek: at 10,000 ranks the first seek then no longer frees
        10,000 private states (~50 ms), and the shared states and containers of the first snapshot
        are there for the seeks into it."""
        first = self._manifests[0]
        source = self.source
        if self._may_share and type(source) is RecordedWorlds:
            nodes = self.reader.manifest(first).get("nodes")
            if isinstance(nodes, list) and len(nodes) >= seek_nodes.SHARED_NODES_MIN:
                world, shared = source.restore_shared(first, set())
                self.reader.check_restored(first, world)
                self._shared = shared
                return world
        return self.restore_world(first, full_check=True)

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        scenario_target: str | None = None,
        scenario: Scenario | None = None,
        branch: str = MAIN_BRANCH,
        launch: Launch = NO_LAUNCH,
    ) -> Session:
        """Open a recording. Its scenario: ``scenario`` (an object, from Python), else
        ``scenario_target`` (``module:attr``: the user's opt-in to import), else by registered name."""
        reader = RecordingReader.open(path)
        try:
            header = reader.header
            if scenario is None:
                scenario = load_scenario(header["scenario"], scenario_target, header.get("scenario_module"))
            elif scenario.name != header["scenario"]:
                raise UnknownScenarioError(
                    f"the recording is of scenario {header['scenario']!r}, not {scenario.name!r}"
                )
            return cls(reader, scenario, branch, launch)
        except BaseException:
            reader.close()
            raise

    def close(self) -> None:
        """End what the world source owns (processes, checkpoints), then close the file."""
        try:
            self.close_source()
        finally:
            self.reader.close()

    def close_source(self) -> None:
        """End what the world source owns, once, with the sources of the tracks opened on this
        session's reader (a track's reader is ours: closing a track closes only its source)."""
        if not self._source_open:
            return
        self._source_open = False
        try:
            while self._tracks:
                self._tracks.pop().close_source()
        finally:
            self.source.close()

    def adopt_track(self, track: Session) -> None:
        """``track`` (another branch on our reader) ends with us unless it is closed before."""
        self._tracks.append(track)

    def release_track(self, track: Session) -> None:
        """End ``track``'s source now (the action that opened it is done with it)."""
        if track in self._tracks:
            self._tracks.remove(track)
        track.close_source()

    # -- the world source: the one way to a world (explore/world_source.py) ------------------------

    def restore_world(self, manifest: ManifestInfo, *, full_check: bool = False) -> World:
        """A new World at a recorded snapshot (``full_check``: recompute its state hash too). Every
        action restores through this, never through the reader, so the world source decides."""
        return self.source.restore(manifest, full_check)

    def simulation(self, world: World, **options: Any) -> Simulation:
        """A Simulation of this session's scenario over ``world`` (a world this session restored, or
        a copy of one), with Simulation's keyword options as the caller would pass them."""
        return self.source.simulation(world, **options)

    def _start_snapshot(self, at: int, by_time: bool) -> ManifestInfo:
        """The latest snapshot at or before event #``at`` (or time ``at``) that the world source can
        re-execute from; the first one when none can (a re-execution from #0 is always possible)."""
        keys = [m.t_ns if by_time else m.events for m in self._manifests]
        position = max(bisect.bisect_right(keys, at) - 1, 0)
        while position > 0 and not self.source.can_start_at(self._manifests[position]):
            position -= 1
        return self._manifests[position]

    def reload(self) -> None:
        """Read the recording's catalog again after frames were appended to it (a branch): the
        cursor and its world stay where they are, and the new branches become visible."""
        reader = RecordingReader.open(self.reader.path)
        self.reader.close()
        self.reader = reader
        self._read_branch()
        self._may_share = rule_kept(reader, self.branch)
        self._parked.clear()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- the cursor -------------------------------------------------------------------------------

    @property
    def position(self) -> Position:
        return Position(self.branch, self.world.events_processed, self.world.t_ns)

    def state_hash(self) -> str:
        return self.world.state_hash()

    def world_copy(self) -> World:
        """An independent copy of the world at the cursor (the source first keeps what a copy of
        it needs to run: ``WorldSource.before_copy``)."""
        self.source.before_copy(self.world)
        store = SnapshotStore(bytes_max=0)
        from timetravel.snapshot.restore import restore

        return restore(store.take(self.world), verify=False)

    # -- moving -----------------------------------------------------------------------------------

    @gc_paused()
    def goto(self, target: int | str) -> Position:
        """Move the cursor to a time (int ns, or text in the display unit) or an event (``#N``)."""
        if isinstance(target, str):
            text = target.strip()
            if text == "start":
                return self.goto_event(0)
            if text == "end":
                return self.goto_event(self._end.events)
            if text.startswith("#"):
                try:
                    return self.goto_event(int(text[1:].replace("_", "")))
                except ValueError:
                    from timetravel.sim.timefmt import TimeFormatError

                    raise TimeFormatError(f"not an event number: {text!r} (write #1200)") from None
            return self.goto_time(parse_time(text, self.display_unit))
        return self.goto_time(target)

    @gc_paused()
    def goto_time(self, t_ns: int) -> Position:
        """The state after every event with time <= ``t_ns`` (the end when ``t_ns`` is past it)."""
        if t_ns >= self._end.t_ns:
            return self._to_end()
        if t_ns < 0:
            return self.goto_event(0)
        snapshot = self._start_snapshot(t_ns, by_time=True)
        if self._parks():
            if self._quiet_until(self.world, t_ns):
                return self._rewind(t_ns)

            def usable(world: World) -> bool:
                forward = world.t_ns <= t_ns and world.events_processed >= snapshot.events
                return self._quiet_until(world, t_ns) or (forward and not world.failures)

            if not usable(self.world):
                taken = self._parked.take(usable)
                if taken is not None:
                    self._parked.park(self.world, self._shared)
                    self.world, self._shared = taken
                    if self._quiet_until(self.world, t_ns):
                        return self._rewind(t_ns)
        world = self.world
        from_cursor = world.t_ns <= t_ns and world.events_processed >= snapshot.events and not world.failures
        world, shared = self._world_to_replay(
            None if from_cursor else snapshot, until_ns=t_ns, events_max=self._end.events
        )
        self._replay(world, until_ns=t_ns, events_max=self._end.events, shared=shared)
        self._clock_into_the_tail(t_ns)
        return self.position

    def _clock_into_the_tail(self, t_ns: int) -> None:
        """A complete recording may end later than its last event (a run stopped at ``--until``):
        its run reached the end's clock with no other event. A re-execution stops at the last
        recorded event, with the clock there; the world at a target between that event and the end
        is that world reading the target, as between any two events (and as a seek from a later
        world gives: explore/parked_worlds.py)."""
        world = self.world
        if world.events_processed == self._end.events and world.t_ns < t_ns < self._end.t_ns:
            world.t_ns = t_ns

    @gc_paused()
    def goto_event(self, number: int) -> Position:
        """The state after event #``number`` (#0: the initial world; the end past the end)."""
        if number >= self._end.events:
            return self._to_end()
        number = max(number, 0)
        snapshot = self._start_snapshot(number, by_time=False)
        world = self.world
        from_cursor = snapshot.events <= world.events_processed <= number and not world.failures
        world, shared = self._world_to_replay(
            None if from_cursor else snapshot, until_ns=None, events_max=number
        )
        self._replay(world, until_ns=None, events_max=number, shared=shared)
        return self.position

    def step(self, count: int = 1) -> Position:
        """``count`` events forward (stops at the end)."""
        return self.goto_event(self.world.events_processed + max(count, 0))

    def back(self, count: int = 1) -> Position:
        """``count`` events back (stops at #0)."""
        return self.goto_event(max(self.world.events_processed - max(count, 0), 0))

    def _world_to_replay(
        self, snapshot: ManifestInfo | None, *, until_ns: int | None, events_max: int
    ) -> tuple[World, dict[str, bytes]]:
        """The world a seek re-executes, restored from ``snapshot`` (None: the cursor's world), with
        every node the recorded events up to the target run on private (explore/seek_nodes.py's
        rule), and its shared nodes by digest (what ``_shared`` becomes when the cursor moves to it).

        Only RecordedWorlds itself shares decoded states: another source (a subclass too, which may
        count or refuse restores) is asked for every restore, as before, and ``_shared`` stays empty."""
        source = self.source
        nodes = len(self.world.nodes)
        sharing = source if self._may_share and type(source) is RecordedWorlds else None
        if sharing is not None and not (self._shared or nodes >= seek_nodes.SHARED_NODES_MIN):
            sharing = None
        start = snapshot.events if snapshot is not None else self.world.events_processed
        touched = None
        if sharing is not None:
            touched = seek_nodes.nodes_run(
                self.reader,
                self._batches,
                start,
                until_ns=until_ns,
                events_max=events_max,
                end=self._end.events,
            )
            if not seek_nodes.worth_sharing(nodes, touched):
                touched = None
        if snapshot is not None:
            if sharing is None or touched is None:
                return self.restore_world(snapshot), {}
            return sharing.restore_shared(snapshot, touched)
        world = self.world
        if self._shared:
            # the cursor's world holds shared states (a seek's, or the open's): decode afresh the ones
            # that will run, through whichever source now serves the session (tests swap it)
            private_value = source.private_value if isinstance(source, RecordedWorlds) else self.reader.value
            names = list(self._shared) if touched is None else [n for n in touched if n in self._shared]
            for name in names:
                world.nodes[name] = private_value(self._shared[name])
                del self._shared[name]
        return world, self._shared

    def _parks(self) -> bool:
        """Whether the cursor's former worlds are kept and rewound (explore/parked_worlds.py): for
        plain-data worlds only (RecordedWorlds itself), whose state is all in the World."""
        return type(self.source) is RecordedWorlds

    def _quiet_until(self, world: World, t_ns: int) -> bool:
        def event_time(number: int) -> int | None:
            event = self.event(number)
            return None if event is None else event.t_ns

        return quiet_until(world, t_ns, event_time)

    def _rewind(self, t_ns: int) -> Position:
        """The cursor's world is the world at ``t_ns`` but for its clock (``_quiet_until``)."""
        self.world.t_ns = t_ns
        self.last_replay_events = 0
        return self.position

    def _to_end(self) -> Position:
        last = self._manifests[-1]
        if last.final or (last.events == self._end.events and self.reader.end(self.branch) is None):
            if self._parks():
                self._parked.park(self.world, self._shared)
            self.world = self.restore_world(last)
            self._shared = {}
            self.last_replay_events = 0
            return self.position
        snapshot = self._start_snapshot(self._end.events, by_time=False)
        self._replay(self.restore_world(snapshot), until_ns=None, events_max=self._end.events, shared={})
        return self.position

    def _overrides_at(self, events: int) -> Overrides | None:
        """Choice overrides for re-executing from event #``events`` (a branch has its own)."""
        if self.fork_events and events >= self.fork_events:
            return self._branch_overrides or None
        return self.overrides or None

    def _replay(
        self, world: World, *, until_ns: int | None, events_max: int, shared: dict[str, bytes]
    ) -> None:
        """Re-execute ``world`` up to ``until_ns`` / event #``events_max``, verifying the chain; the
        cursor then holds ``world``, whose nodes ``shared`` are shared decoded states."""
        verifier = ChainVerifier(self.reader, self._batches, self.cause_if_mismatch)
        simulation = self.simulation(
            world,
            overrides=self._overrides_at(world.events_processed),
            chain_batch_events=int(self.header.get("chain_batch_events", 4096)),
            determinism=self.determinism,
            on_chain_batch=verifier.on_chain_batch,
            recorded=True,
        )
        start = world.events_processed
        remaining = events_max - start
        try:
            if remaining > 0 or (until_ns is not None and until_ns > world.t_ns):
                simulation.run(until_ns=until_ns, max_events=max(remaining, 0))
            verifier.check_open_batch(world.chain_events, world.chain_batch)
        except BaseException:
            self._forget_shared()
            raise
        self.last_replay_events = world.events_processed - start
        if world is not self.world and self._parks():
            self._parked.park(self.world, self._shared)
        self.world = world
        self._shared = shared
        if verifier.mismatch is not None:
            self._forget_shared()
            raise ReplayDivergence(verifier.mismatch)

    def _forget_shared(self) -> None:
        """A re-execution that raised or left the recorded events may have run on a node it was not
        expected to (a handler of a diverged event): the source forgets every decoded state, so no
        later seek is given one. The cursor's world keeps its ``_shared`` names: they are made
        private (decoded afresh from their digests) before anything runs on them, as before."""
        self._parked.clear()
        if isinstance(self.source, RecordedWorlds):
            self.source.forget_shared()

    # -- re-executing without moving the cursor (searches, exports: explore/stepper.py) -----------

    def overrides_at(self, events: int) -> Overrides | None:
        """The choice overrides that re-execute this branch from event #``events`` on."""
        return self._overrides_at(events)

    def snapshot_world(self, position: int) -> World:
        """A new World restored from ``snapshots()[position]``; the cursor does not move."""
        return self.restore_world(self._manifests[position])

    # -- what happened ----------------------------------------------------------------------------

    def events_around(
        self, number: int | None = None, before: int = 10, after: int = 10
    ) -> list[RecordedEvent]:
        """Recorded events ``#number-before+1 .. #number+after`` (``number``: the cursor)."""
        center = self.world.events_processed if number is None else number
        found = []
        for candidate in range(max(center - before + 1, 1), center + after + 1):
            event = self.event(candidate)
            if event is not None:
                found.append(event)
        return found


__all__ = ["Session"]
