"""The torch world source: worlds whose ranks are processes, rewound by fork checkpoints.

A Session re-executes a recording by restoring a World snapshot and running the kernel from it.
For the ``torch`` scenario that is not enough: the World's rank nodes stand for processes running
the user's script, and those must be exactly where the snapshot says. :class:`TorchWorlds` is the
session's world source for such recordings (explore/world_source.py defines the seam): it

* lets every re-execution run its ranks **in parallel** (a result is sent when the World knows it, so
  a rank may run ahead of the World by one result) and **quiesces** them only where a checkpoint is
  taken: a rank that ran ahead is read until it blocks again, what it sent kept for its poll
  (``RankDriver.quiesce``), so every rank process is blocked where the World says and can be forked;
* keeps **checkpoints** — a forked copy of every live rank (checkpoints.py) — at the recording's
  snapshot points it re-executes through, and where the cursor's world is copied (a branch, a
  fan-out: ``before_copy``), keyed by :func:`specs.rank_key` (what the processes have been
  handed, which is what they are); beside one at a snapshot point, a copy of the World
  (world_copy.py), which a seek restores instead of decoding the snapshot's arrays;
* attaches a world to ranks **resumed** from the matching checkpoint when a handler first needs
  them, or, when none is kept (a recording opened in a new process), **rebuilds** them by
  deterministic re-execution from the nearest earlier checkpoint or from the start, as rr does;
* bounds the live checkpoints (``checkpoints_max``, from a byte budget and the measured private
  memory of the first set) and thins them exponentially towards the past.

It imports nothing from explore/: the Session is passed in and used through its public methods.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from timetravel.sim.kernel import Simulation
from timetravel.sim.launch import Launch
from timetravel.sim.scenario import ConfigError, NotAuthorizedError
from timetravel.sim.world import DATA_SLOTS, World
from timetravel.torch.protocol.wire import ChannelClosed, ProtocolError
from timetravel.torch.world import checkpoints, workdir, world_copy
from timetravel.torch.world.checkpointing_run import CheckpointingSimulation
from timetravel.torch.world.driver import RankDriver, RankStartError
from timetravel.torch.world.host import RankHost
from timetravel.torch.world.journal_seek import journal_frames_from, replayed_host
from timetravel.torch.world.kept_checkpoints import (
    BOUND_MEASURE_EVERY,
    SHARED,
    KeptCheckpoint,
    budget_bytes,
)
from timetravel.torch.world.module_probe import probing
from timetravel.torch.world.op_probe import tracing_ops
from timetravel.torch.world.specs import (
    C10D_NODE,
    rank_key,
    rank_states,
    released,
    script_to_run,
)
from timetravel.torch.world.state import held_elided, payloads_elided
from timetravel.torch.world.state_pull import StatePulls


class _NullOutput:
    """Where re-executed ranks' output goes: it was shown when the run was recorded."""

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


class TorchWorlds:
    """The world source of a torch recording's Session; see the module docstring."""

    def __init__(self, session: Any) -> None:
        self.session = session
        self.shared = SHARED
        """Checkpoints are shared by every torch Session of this process (the rank key says what a
        set is, whatever recording or branch asked): a compare's tracks resume the cursor's."""
        self.shared.users += 1
        self.reexecuted_events = 0
        self.refused: str | None = None
        """Why the last checkpoint was refused (threads, shared memory), if one was."""
        self.host = RankHost(self._launch(), keep_workdirs=True)
        """The rank processes of this Session's re-executions (host.py), handed to every Simulation
        it makes; closed with the Session."""
        self.host.on_evict = self._evicted

    def _launch(self) -> Launch:
        """What the user named for this Session (``--script``: sim/launch.py); re-executed ranks' output
        is not shown (it was when the run was recorded) unless the command sends it somewhere."""
        launch: Launch = self.session.launch
        return launch if launch.output is not None else launch.with_output(_NullOutput())

    def _host(self) -> RankHost:
        self.host.launch = self._launch()  # the command names --script after the Session opened
        return self.host

    # -- the seam ----------------------------------------------------------------------------------

    def restore(self, manifest: Any, full_check: bool = False) -> World:
        """The snapshot's World: a copy of the one kept with its checkpoint, or decoded from the file
        (always, for a ``full_check``, which checks the decoder too)."""
        kept = None if full_check else self.shared.find(manifest.events, manifest.state_hash)
        if kept is not None and kept.world is not None and not (self.values and held_elided(kept.world)):
            return world_copy.copy_world(kept.world)
        world = self.session.reader.restore(manifest, full_check=full_check)
        fork = self._is_fork(manifest)  # kept whole but for state the branch holds as digests
        if self.values and not full_check and not fork and held_elided(world) and self._may_run(world):
            self._materialize(world)  # its tensors' values, rebuilt by re-execution
        return world

    def _may_run(self, world: World) -> bool:
        """Whether this Session may re-execute ``world``'s script (the user named it: --script)."""
        try:
            script_to_run(world.config, self._launch())
        except (NotAuthorizedError, ConfigError):
            return False
        return True

    def can_start_at(self, manifest: Any) -> bool:
        """From the start, from any snapshot the journal re-executes from (no ranks needed), from a
        snapshot with a live checkpoint of its ranks, or from a branch's fork snapshot: a seek on a
        branch must never re-execute across its fork, where the branch's changes (a dropped fault,
        a setting) took effect; the ranks there are rebuilt from the parent's history if no
        checkpoint holds them (:meth:`_rebuild`)."""
        if manifest.events == 0 or self._is_fork(manifest):
            return True
        if not self.values and journal_frames_from(self.session, manifest.events) is not None:
            return True
        return self._usable(manifest)

    # -- re-executing from the journal (journal.py) ---------------------------------------------------

    @property
    def values(self) -> bool:
        """A command reads tensors' values (``with_values``): no re-execution from the journal."""
        return self.shared.values_wanted > 0

    @contextlib.contextmanager
    def with_values(self) -> Iterator[None]:
        """Within: worlds hold tensors' values — re-executions run the ranks (every state step
        pulled), snapshots holding digests only are rebuilt (what an action that reads a tensor
        needs: ``Session.read_values``). For every torch Session of the process meanwhile: an
        action's tracks and probes are Sessions of their own."""
        self.shared.values_wanted += 1
        try:
            yield
        finally:
            self.shared.values_wanted -= 1

    def values_not_rebuilt(self) -> list[str]:
        """Why values the last re-execution was asked for stayed digests (state_pull.py's notes)."""
        pulls = self.host.state_pulls
        return list(pulls.notes) if pulls is not None else []

    def materialize(self, world: World) -> None:
        """``world`` (the cursor's, say) with its tensors' values, rebuilt by re-execution."""
        if held_elided(world) and self._may_run(world):
            self._materialize(world)

    def _is_fork(self, manifest: Any) -> bool:
        fork = self.session.fork_events
        return bool(fork) and manifest.events == fork and not manifest.final

    def simulation(self, world: World, *, recorded: bool = False, **options: Any) -> Simulation:
        """A Simulation of ``world``: ``recorded`` (a seek, a search: the recorded events again),
        re-executed from the recording's journal without rank processes when it has one and no
        command asked for tensors' values (journal.py); else with its ranks, every state step's
        tensors pulled, the tensors in flight rebuilt first if the world holds them as digests."""
        if recorded and not self.values:
            replayed = replayed_host(self.session, world.events_processed, self._launch())
            if replayed is not None:
                return Simulation(self.session.scenario, world, processes=replayed, **options)
        if payloads_elided(world):
            self._materialize(world)
        # with values wanted, every state step's tensors are pulled into the World (state_pull.py)
        self.host.state_pulls = StatePulls.into_every_step() if self.values else None
        self._attach(world)
        return CheckpointingSimulation(
            self._snapshot_points, self.keep, self.session.scenario, world, processes=self._host(), **options
        )

    def _snapshot_points(self) -> list[int]:
        """The events at which the recording has a snapshot (not the final one): where checkpoints go."""
        return sorted({m.events for m in self.session.snapshots_info if not m.final})

    def before_copy(self, world: World) -> None:
        """``world`` is about to be copied (a branch, a fan-out, a divergence search starts from
        the cursor): fork its live ranks now, so the copy can resume them after the original moves.
        Tensors in flight held as digests are rebuilt first, from the history they came from: a
        branch changes its copy (a setting, a fault), and could not be checked against it after."""
        if payloads_elided(world) and self._may_run(world):
            self._materialize(world)
        self.keep(world)

    def close(self) -> None:
        self.host.on_evict = None
        self.host.close()
        self.shared.users -= 1
        if self.shared.users == 0:  # no other Session (a compare's track, the one that opened it) lives on
            self.shared.close()

    # -- explain's module probe (module_probe.py) ------------------------------------------------------

    def probing(self, rank: int, step: int, world: World | None = None, *, init: bool = False) -> Any:
        """A context in which this Session's re-execution probes ``rank`` in ``step``; yields the probe.
        The probe lives in the rank processes: make the re-execution within :meth:`with_values`."""
        return probing(self._host(), rank, step, world, init=init)

    @contextlib.contextmanager
    def tracing_ops(
        self,
        step: int,
        ranks: int,
        world: World | None = None,
        capture: dict[int, list[list[Any]]] | None = None,
        *,
        now: bool = False,
    ) -> Iterator[Any]:
        """A context in which this Session's re-execution hashes every rank's ops of ``step``
        (``diff --ops``: op_probe.py); yields the probe. ``now``: ``world`` stands mid-run (its
        ranks live, or brought up from a checkpoint): each rank is run to its next wait, then asked
        to start hashing there, so both branches of a diff start at one event. The trace lives in the
        rank processes: make the re-execution within :meth:`with_values`."""
        live = self._quiesced(world) if now and world is not None else None
        with tracing_ops(self._host(), step, ranks, world, capture, whole_step=not now) as probe:
            if live is not None and world is not None:
                probe.on_resume(world, live)
            yield probe

    def _quiesced(self, world: World) -> RankDriver:
        """``world``'s ranks, each blocked at its next wait (a rank that ran ahead read until it blocks)."""
        live = self.host.driver(world)
        for rank, state in enumerate(rank_states(world)):
            if state["status"] == "waiting" and live.ahead(rank, state["delivered"]):
                live.quiesce(rank)
        return live

    def end_probe(self, world: World) -> None:
        """Stop the probed world's ranks and remove their working directory unless checkpoints share it:
        no checkpoint holds the probed processes, so nothing else will resume them or read it."""
        live = self.host.driver_for(world)
        self.host.stop_world(world)
        shared = self.shared.directories
        if live is not None and live.workdir is not None and all(d is not live.workdir for d in shared):
            live.workdir.close()

    def memory(self) -> dict[str, Any]:
        """What the live checkpoints hold: sets, processes, private bytes (USS, measured now: a
        checkpoint's own pages grow as the live rank writes over what they shared), the bound."""
        uss = sum(
            checkpoints.uss_bytes(c.pid) for kept in self.shared.kept for c in kept.ranks.ranks.values()
        )
        processes = sum(len(kept.ranks.ranks) for kept in self.shared.kept)
        return {
            "checkpoints": len(self.shared.kept),
            "checkpoints_max": self.shared.checkpoints_max,
            "processes": processes,
            "uss_bytes": uss,
            "uss_bytes_per_process": uss // processes if processes else 0,
            "world_bytes": sum(kept.world_bytes for kept in self.shared.kept),
            "budget_bytes": budget_bytes(),
            "reexecuted_events": self.reexecuted_events,
            "refused": self.refused,
        }

    # -- attaching a world to its ranks ------------------------------------------------------------

    def _attach(self, world: World) -> None:
        if self.host.driver_for(world) is not None:
            return
        if all(state["status"] == "new" for state in rank_states(world)):
            return  # nothing ran yet: fresh ranks, started by the first handler that needs them
        key = rank_key(world)
        self.host.attach(world, lambda: self._bring_up(world, key))

    def _bring_up(self, world: World, key: str) -> RankDriver:
        kept = self.shared.find_key(key)
        if kept is None:
            kept = self._rebuild(world, key)
        live = self._resume(world, kept)
        if live is None:
            kept = self._rebuild(world, key)
            live = self._resume(world, kept)
            if live is None:
                raise RankStartError(f"the ranks rebuilt for #{world.events_processed} could not resume")
        if self.host.probe is not None:
            self.host.probe.on_resume(world, live)  # explain's probe: hooks before the ranks run on
        _hand_over_pending(world, live)
        return live

    def _resume(self, world: World, kept: KeptCheckpoint) -> RankDriver | None:
        """A driver for ``world`` with ranks resumed from ``kept`` in its restored files (None: the
        checkpoint died or stopped answering, and is forgotten)."""
        directory = self._free_directory(kept.directory)
        directory.restore(kept.files)
        live = self._host().new_driver(world, spawn=False, directory=directory)
        try:
            self.shared.checkpoints().resume(kept.ranks, live)
        except (checkpoints.CheckpointUnusable, RankStartError):
            self.shared.forget(kept)
            live.stop()
            return None
        return live

    def _free_directory(self, origin: Any) -> Any:
        """A working directory no live execution uses, for ranks resumed from a checkpoint taken in
        ``origin``: ``origin`` itself or another one sharing its blob store when free, else a new one.
        Two live executions never share one (a divergence search steps two sides resumed from one
        checkpoint: each side's ranks must read back their own files, not the other side's)."""
        candidates = [origin] + [
            directory
            for directory in self.shared.directories
            if directory is not origin and directory.store is origin.store and not directory.closed
        ]
        for directory in candidates:
            if not directory.closed and not directory.in_use:
                return directory
        directory = workdir.WorkingDirectory.create(None, store=origin.store)
        self.shared.directories.append(directory)
        return directory

    def _rebuild(self, world: World, key: str) -> KeptCheckpoint:
        """Re-execute up to ``world``'s event from the nearest earlier start, and keep a checkpoint
        there; the replayed world must reach the same rank key, or nothing is resumed."""
        target = world.events_processed
        replayed, _start = self._replay_to(world)
        kept = self.shared.find_key(key)
        if kept is None:
            raise RankStartError(
                f"re-executing to #{target} did not reach the ranks this world describes "
                f"({'the run diverged' if replayed.events_processed == target else 'the run ended early'})"
            )
        return kept

    def _replay_to(self, world: World) -> tuple[World, int]:
        """The world at ``world``'s event re-executed from the nearest earlier start (a checkpoint's
        world, the fork, #0), its ranks kept there and stopped; and the event it started from.

        On a branch, the history before the fork is the parent's (its config and faults) and the
        rest the branch's: a target past the fork is re-executed from the fork snapshot, whose ranks
        are rebuilt first (if no checkpoint holds them) from the parent's history up to the fork."""
        target = world.events_processed
        fork = self.session.fork_events
        if fork and target > fork:
            start = max(
                (m for m in self.session.snapshots_info if fork <= m.events <= target and not m.final),
                key=lambda m: (
                    self.shared.find(m.events, m.state_hash) is not None or self._is_fork(m),
                    m.events,
                ),
            )
        else:
            before = [m for m in self.session.snapshots_info if m.events < max(target, 1) and not m.final]
            usable = [m for m in before if m.events == 0 or self._usable(m)]
            start = max(usable, key=lambda m: m.events)
        kept = self.shared.find(start.events, start.state_hash)
        if kept is not None and kept.world is not None:
            replayed = world_copy.copy_world(kept.world)
        else:  # #0 or a fork: their snapshots keep every tensor (recording/recorder.py)
            replayed = self.session.reader.restore(start)
        simulation = self.simulation(replayed, overrides=self.session.overrides_at(start.events))
        if target > start.events:
            simulation.run(max_events=target - start.events)
        self.keep(replayed)
        self.host.stop_world(replayed)  # its ranks are kept now; the world that asked resumes them
        self.reexecuted_events += replayed.events_processed - start.events
        return replayed, start.events

    def _usable(self, manifest: Any) -> bool:
        """A snapshot with a checkpoint to re-execute from (with values wanted: one whose kept world
        holds them, since a re-execution pulls only the state steps it runs through)."""
        kept = self.shared.find(manifest.events, manifest.state_hash)
        if kept is None:
            return False
        return not self.values or (kept.world is not None and not held_elided(kept.world))

    def _materialize(self, world: World) -> None:
        """``world`` was restored from a snapshot that keeps tensors as digests only (sim/elided.py):
        its contents become those of the same world re-executed from the nearest checkpoint or the
        start (every state step's tensors pulled: state_pull.py), checked bit for bit against its
        state hash, which an elided array does not change. Its ranks are kept there."""
        replayed, _start = self._replay_to(world)
        if replayed.events_processed != world.events_processed or replayed.state_hash() != world.state_hash():
            raise RankStartError(
                f"re-executing to #{world.events_processed} rebuilt another world than the recorded one"
            )
        for slot in DATA_SLOTS:
            setattr(world, slot, getattr(replayed, slot))

    def _evicted(self, live: RankDriver) -> None:
        """A driver stops to make room: keep its world's ranks, and resume them when it runs again."""
        world = live.world
        if world is None:
            return
        self.keep(world)
        key = rank_key(world)
        if self.shared.find_key(key) is not None:
            self.host.attach(world, lambda: self._bring_up(world, key))

    # -- keeping checkpoints -------------------------------------------------------------------------

    def keep(self, world: World) -> None:
        """Fork the live ranks of ``world`` now, if they are quiescent and not kept already."""
        live = self.host.driver_for(world)
        probed = self.host.probe is not None and self.host.probe.is_probed(world)
        if live is None or world.failures or probed:
            return  # a probed process (explain's module hooks) is never resumed by a later seek
        states = rank_states(world)
        if any(state["status"] not in ("new", "waiting", "exited", "crashed") for state in states):
            return  # a rank stopped mid-poll (stuck, a protocol error): the world has failed
        key = rank_key(world)
        found = self.shared.find_key(key)
        if found is not None:
            if found.world is not None and held_elided(found.world) and not held_elided(world):
                found.world = world_copy.copy_world(world, deduplicate=True)  # the same, with values
            return
        waiting = [rank for rank, state in enumerate(states) if state["status"] == "waiting"]
        fresh = [rank for rank, state in enumerate(states) if state["status"] == "new"]
        if any(live.delivered.get(rank, 0) != released(world, rank) for rank in waiting):
            self.refused = "a rank's process was not handed what the World released to it"
            return  # the rank key would say more (or less) than the process is: never resume it
        try:
            for rank in waiting:
                if live.ahead(rank, states[rank]["delivered"]):
                    live.quiesce(rank)
        except (ChannelClosed, ProtocolError, TimeoutError) as error:
            self.refused = f"a rank that ran ahead of the World did not block again: {error}"
            return  # its poll meets the same message or error in the inbox and the channel
        try:
            ranks = self.shared.checkpoints().take(live, waiting, fresh)
        except checkpoints.CheckpointUnusable as error:
            self.refused = str(error)
            return
        files = live.workdir.capture()
        state_hash = world.state_hash()
        kept = KeptCheckpoint(world.events_processed, world.t_ns, state_hash, key, ranks, live.workdir, files)
        if self._is_snapshot(world.events_processed, state_hash):
            kept.world = world_copy.copy_world(world, deduplicate=True)
            kept.world_bytes = world_copy.world_bytes(kept.world)
        if all(directory is not live.workdir for directory in self.shared.directories):
            self.shared.directories.append(live.workdir)
        self.shared.kept.append(kept)
        self.shared.taken += 1
        if self.shared.taken % BOUND_MEASURE_EVERY == 0:
            self.shared.measure_bound()
        self.shared.thin()

    def _is_snapshot(self, events: int, state_hash: str) -> bool:
        return any(m.events == events and m.state_hash == state_hash for m in self.session.snapshots_info)


def _hand_over_pending(world: World, live: RankDriver) -> None:
    """Results the World released but the ranks' polls have not handed over yet (c10d keeps them):
    sent at once (unless the resumed process has it already), so that the ranks run in parallel."""
    delivering = world.nodes[C10D_NODE]["delivering"]
    for rank, state in enumerate(rank_states(world)):
        entry = delivering.get(str(rank))
        if entry is None or entry["number"] <= state["delivered"]:
            continue
        if rank in live.sockets:
            live.offer(rank, entry["number"], entry["message"])
        else:  # a rank without a process (it ended): nothing to send, as before it ended
            live.pending[rank] = (entry["number"], entry["message"])
