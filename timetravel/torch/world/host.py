"""The one small interface to the user's processes: the rank processes of the worlds one owner runs.

The World is data; the ranks' Python stacks are not. A :class:`RankHost` owns the live rank
processes (a :class:`~timetravel.torch.world.driver.RankDriver` per world execution) of the worlds
*one owner* runs, and is owned in turn:

* by a run's :class:`~timetravel.sim.kernel.Simulation` (``Scenario.processes`` makes it from the
  user's :class:`~timetravel.sim.launch.Launch`; the Simulation closes it when the run can go no
  further), or
* by a torch Session's world source (world_source.py), which hands it to every Simulation it makes,
  keeps fork checkpoints of its drivers' ranks and closes it with the Session.

Handlers reach it as ``ctx.processes``. The rank nodes' handlers (ranks.py) ask it for their world's
driver (:meth:`driver`) and carry out, through it, what c10d decided as data (:meth:`carry_out`:
release a result, kill a rank, restart every rank). Nothing here is keyed by ``id(world)``: a
driver refers to its world weakly, so a world nobody holds any more can never be run again, and its
driver is stopped at the next start (:meth:`start`). At most ``live_max`` drivers are live; the
oldest is stopped to make room, after ``on_evict`` (the world source checkpoints its ranks first).
"""

from __future__ import annotations

import sys
import weakref
from collections.abc import Callable
from typing import Any

from timetravel.sim.event import Event
from timetravel.sim.launch import NO_LAUNCH, Launch
from timetravel.sim.world import World
from timetravel.torch.world import collectives, workdir
from timetravel.torch.world.driver import KILLED_NAMED_MAX, RankDriver, RankStartError
from timetravel.torch.world.journal import Journal
from timetravel.torch.world.params import PYTHON_HASH_SEED_DEFAULT
from timetravel.torch.world.specs import C10D_NODE, rank_specs, rank_states, script_to_run
from timetravel.torch.world.state_pull import StatePulls

LIVE_DRIVERS_MAX = 4
"""Live drivers per host: a run has one; a Session may execute a few worlds in turn (a divergence
search steps two branches side by side, a compare's tracks)."""
ATTACHMENTS_MAX = 256
"""Worlds waiting for ranks brought up from a checkpoint (the oldest is forgotten past it)."""


class RankHost:
    """The rank processes of the worlds one owner runs; see the module docstring."""

    def __init__(self, launch: Launch = NO_LAUNCH, *, keep_workdirs: bool = False) -> None:
        self.launch = launch
        self.keep_workdirs = keep_workdirs
        """A Session's host: working directories outlive drivers (checkpoints refer to them)."""
        self.drivers: list[RankDriver] = []
        """Live drivers, least recently started first."""
        self.attachments: list[tuple[weakref.ref[World], Callable[[], RankDriver]]] = []
        """Worlds whose ranks must come from a checkpoint, with how to bring them up (world_source.py)."""
        self.on_evict: Callable[[RankDriver], None] | None = None
        self.probe: Any = None
        """explain's module probe while one runs (module_probe.Probe), else None."""
        self.journal: Journal | None = None
        """What the World reads from its ranks, kept for a recording (journal.py); None: not kept."""
        self.pulls_before: StatePulls | None = None
        self.state_pulls: StatePulls | None = None
        """Which state steps' bytes to pull from the ranks, and what was pulled (state_pull.py): a
        recorder's (``record_state``) or a command's rebuild; None: the bytes stay in the ranks."""
        self.pull_at_close = not keep_workdirs
        """A run's host pulls its ranks' last state into their world as it closes (a failed run's
        ranks end there); a Session's does not (its worlds' ends are recorded already)."""
        self.references: dict[str, dict[str, Any]] = {}
        """Reference runs of the worlds this host ran, by what they are a function of (reference.py)."""
        self.killed: list[str] = []
        """Processes the ranks of stopped drivers had started and left running (``r0: sleep``), killed
        with their rank (rank_sessions.py); a run's summary names them."""
        self.closed = False

    # -- a world's driver --------------------------------------------------------------------------

    def driver_for(self, world: World) -> RankDriver | None:
        """The live driver whose ranks belong to ``world`` (by identity), or None."""
        for live in self.drivers:  # the weak reference itself: no call into the driver on the hot path
            if live.world_ref is not None and live.world_ref() is world:
                return live
        return None

    def driver(self, world: World) -> RankDriver:
        """The live ranks of ``world``: already bound, brought up from a checkpoint, or started fresh."""
        live = self.driver_for(world)
        if live is not None:
            return live
        bring_up = self._take_attachment(world)
        if bring_up is not None:
            return bring_up()
        if any(state["status"] != "new" for state in rank_states(world)):
            raise RankStartError(
                f"no rank processes for this world at #{world.events_processed}: its ranks already ran, "
                "and nothing can resume them here (re-execute from the start, or from a checkpoint)"
            )
        return self.new_driver(world, spawn=True)

    def new_driver(
        self, world: World, *, spawn: bool, directory: workdir.WorkingDirectory | None = None
    ) -> RankDriver:
        """A driver bound to ``world`` (``spawn=False``: the caller resumes ranks into it), its ranks
        running in ``directory`` (a resumed checkpoint's) or in a new private working directory, a
        copy of the ``workdir`` setting (world/workdir.py). Refuses code the user did not name."""
        assert not self.closed, "a closed host starts no ranks"
        config = world.config
        script = script_to_run(config, self.launch)
        if directory is None:
            directory = workdir.WorkingDirectory.create(config["workdir"] or None)
        restarts = world.nodes[C10D_NODE]["restarts"]
        specs = rank_specs(
            config,
            world.seed,
            restarts,
            cwd=directory.path,
            script=script,
            extra_settings=self._probe_settings(config),
        )
        live = RankDriver(
            specs,
            output=self._output(config),
            stuck_timeout_s=config["stuck_timeout"],
            hash_seed=config.get("python_hash_seed", PYTHON_HASH_SEED_DEFAULT),
        )
        live.workdir = directory
        live.owns_workdir = not self.keep_workdirs
        directory.in_use = True
        live.bind(world)
        self.start(live, spawn=spawn)
        return live

    def _output(self, config: dict[str, Any]) -> Any:
        if config["rank_output"] == "quiet":
            return None
        return self.launch.output if self.launch.output is not None else sys.stdout

    def _probe_settings(self, config: dict[str, Any]) -> dict[int, dict[str, Any]]:
        """Per rank, what this execution's ranks are told beside the world's config: explain's probe,
        and the launch's own process settings (the capture folder of ``--against-real``)."""
        probe = self.probe.start_settings() if self.probe is not None else {}
        launched = dict(self.launch.process_settings)
        if not launched:
            return probe
        ranks = config["nproc"] * config["nnodes"]
        return {rank: {**launched, **probe.get(rank, {})} for rank in range(ranks)}

    def start(self, live: RankDriver, *, spawn: bool) -> None:
        """Make ``live`` one of this host's drivers: drivers of worlds nobody holds stop, then the
        oldest stops past LIVE_DRIVERS_MAX (``on_evict`` first)."""
        for other in list(self.drivers):
            if other.world is None:
                other.stop()
        while len(self.drivers) >= LIVE_DRIVERS_MAX:
            oldest = self.drivers[0]
            if self.on_evict is not None:
                self.on_evict(oldest)
            oldest.stop()
        live.host = self
        self.drivers.append(live)
        if spawn:
            live.spawn([spec["rank"] for spec in live.specs])

    def forget(self, live: RankDriver) -> None:
        """``live`` stopped (RankDriver.stop calls this)."""
        if live in self.drivers:
            self.drivers.remove(live)
        self.killed = (self.killed + live.killed)[:KILLED_NAMED_MAX]
        live.killed = []

    # -- worlds whose ranks come from a checkpoint ----------------------------------------------------

    def attach(self, world: World, bring_up: Callable[[], RankDriver]) -> None:
        """When a handler first needs ``world``'s ranks, ``bring_up()`` makes its driver (world_source.py)."""
        self.attachments = [
            (ref, up) for ref, up in self.attachments if ref() is not None and ref() is not world
        ]
        if len(self.attachments) >= ATTACHMENTS_MAX:
            self.attachments.pop(0)
        self.attachments.append((weakref.ref(world), bring_up))

    def _take_attachment(self, world: World) -> Callable[[], RankDriver] | None:
        for index, (ref, bring_up) in enumerate(self.attachments):
            if ref() is world:
                del self.attachments[index]
                return bring_up
        return None

    # -- what c10d decided, carried out -----------------------------------------------------------

    def carry_out(self, world: World, orders: list[list[Any]]) -> None:
        """Do, in order, what c10d decided for the live processes of ``world`` (c10d.py records
        each as data: ``["release", rank, number, message]``, ``["kill", rank]``, ``["restart"]``)."""
        live = self.driver(world)
        for order in orders:
            if order[0] == "release":
                live.offer(order[1], order[2], order[3])
            elif order[0] == "kill":
                live.kill(order[1])
            elif order[0] == "restart":
                self._restart(world, live)
            else:
                raise AssertionError(f"c10d ordered {order[0]!r}, which no host carries out")

    def _restart(self, world: World, live: RankDriver) -> None:
        """A torchelastic restart: settle every surviving rank, then fork every rank anew."""
        _settle(world, live)
        c10d_state = world.nodes[C10D_NODE]
        script = script_to_run(world.config, self.launch)
        specs = rank_specs(
            world.config, world.seed, c10d_state["restarts"], cwd=live.workdir.path, script=script
        )
        live.restart(specs)

    # -- what the World reads from its ranks (journal.py) ------------------------------------------

    def take_messages(
        self, world: World, event: Event, rank: int, delivery: int | None
    ) -> tuple[list[dict[str, Any]], BaseException | None]:
        """A poll of ``rank`` (ranks.py): hand it result ``delivery`` (if any), then its messages up
        to the one that blocks it and how its channel ended if it did (journaled when recorded)."""
        live = self.driver(world)
        if delivery is not None:
            live.deliver(rank, delivery)
        messages, ended = live.receive_until_blocked(rank)
        if self.journal is not None:
            self.journal.poll(event, rank, messages, ended)
        return messages, ended

    def complete(self, event: Event, entries: list[dict[str, Any]], size: int, reduce_order: str) -> Any:
        """``collectives.complete`` of a collective's entries, its outputs journaled when recorded
        (a replay reads them back: journal.py)."""
        done = collectives.complete(entries, size, reduce_order)
        if self.journal is not None and done.outputs is not None:
            self.journal.computed(event, {str(index): outputs for index, outputs in done.outputs.items()})
        return done

    def computed(self, event: Event, compute: Callable[[], Any]) -> Any:
        """An array the World computes from tensors' bytes (a reduction, a flipped bit): computed
        here, and journaled when recorded (journal.py: a replay takes it from there)."""
        value = compute()
        if self.journal is not None:
            self.journal.computed(event, value)
        return value

    def take_journal(self) -> list[list[Any]]:
        """The journal records since the last take (the recorder writes them batch by batch)."""
        return self.journal.take() if self.journal is not None else []

    # -- training state's bytes (state_pull.py) --------------------------------------------------------

    def state_step_polled(self, world: World, rank: int, step: int) -> None:
        """A poll read ``rank``'s state step ``step`` and the rank now waits (ranks.py)."""
        pulls = self.state_pulls
        if pulls is None:
            return
        described = world.nodes[f"r{rank}"].get("state_incoming", {}).get(str(step))
        live = self.driver_for(world)
        if described is not None and live is not None:
            pulls.at_step(live, rank, step, described)

    def record_state(self) -> StatePulls:
        """A recorder starts: it keeps the journal (journal.py) and the bytes of the state steps a
        recording keeps (state_pull.py)."""
        self.journal = Journal()
        self.pulls_before = self.state_pulls
        self.state_pulls = StatePulls.for_recording()
        return self.state_pulls

    def recording_ended(self, pulls: StatePulls) -> None:
        """The recorder that asked for ``pulls`` finished: what was pulled before it is pulled again."""
        if self.state_pulls is pulls:
            self.state_pulls = self.pulls_before
        self.journal = None

    def final_state(self, world: World) -> None:
        """As a run's ranks end (or before a recording's final snapshot): each rank's latest state,
        pulled into the World (state_pull.py: a run's last world holds its ranks' last state)."""
        pulls = self.state_pulls if self.state_pulls is not None else StatePulls(grid_base=None)
        pulls.final(self.driver_for(world), world)

    # -- the end -----------------------------------------------------------------------------------

    def stop_world(self, world: World) -> None:
        """Stop the ranks of ``world`` (its run ended; a recording's last state pulled first)."""
        live = self.driver_for(world)
        if live is not None:
            self.final_state(world)
            live.stop()

    def summary(self) -> dict[str, Any]:
        """For a run's summary (``runner.processes_summary``): the processes its ranks started that
        were still running when their rank was ended, and were killed with it (none: nothing said)."""
        return {"processes_killed": list(self.killed)} if self.killed else {}

    def close(self) -> None:
        """Stop every driver of this host (a recording's last state pulled first). Safe to call twice."""
        if self.pull_at_close and not self.closed:
            for live in list(self.drivers):
                world = live.world
                if world is not None:
                    self.final_state(world)
        self.closed = True
        for live in list(self.drivers):
            live.stop()
        self.attachments.clear()


def _settle(world: World, live: RankDriver) -> None:
    """Before a restart kills them: every surviving rank runs to its next wait on the World.

    A rank whose collective completed has its result (as soon as the World released it) and runs
    on in wall time — it may be halfway through ``torch.save`` when the restart kills it, and what
    the restarted ranks then read would depend on the machine's timing. Here each rank is handed every
    result the World released to it and runs until it blocks again (a wait, its exit or its death),
    so the files a restart finds are the same on every run, under a Session or not.
    What such a rank sends after its result is dropped with its incarnation; its output is shown."""
    deliveries = world.nodes[C10D_NODE]["deliveries"]
    for rank in range(world.nodes[C10D_NODE]["ranks"]):
        offered = int(deliveries.get(str(rank), 0))
        if rank not in live.sockets or offered <= int(world.nodes[f"r{rank}"]["delivered"]):
            continue  # gone, or its poll took its last result and it ran to its wait then: blocked
        live.deliver(rank, offered)
        live.run_to_next_wait(rank)
