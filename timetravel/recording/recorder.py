"""Recording a run: the kernel's chain batches become EVENTS frames, its pauses become snapshots.

:class:`Recorder` binds a World to its scenario in a :class:`Simulation` that hands every flushed
chain batch to the recording (using the bytes the kernel already packed for the hash chain) and
pauses every ``snapshot_every_events`` events for a copy-on-write snapshot: the store re-encodes
only the nodes that ran, and the writer stores only blobs and pages it has not stored before,
float pages as XOR deltas. :func:`record_run` is the one-call form behind ``run --record``.

**The default interval** (SNAPSHOT_EVERY_EVENTS_DEFAULT = 8192 events, two chain batches) is
set by the seek budget: a seek restores the nearest snapshot at or before the target and
re-executes up to one interval. On the 1024-node gossip recording of the benchmark, the kernel
re-executes ~150-250 k events/s on a shared 2-core machine, so 8192 events cost 35-55 ms, and
restoring 1024 nodes ~15 ms: a p95 well under 100 ms. Twice the interval would put the p95 at the
budget; half of it would double the snapshot cost of a gossip recording (where every node changes
between two snapshots) for little gain. A multiple of the chain batch puts snapshots on batch
boundaries, so a snapshot never carries an open batch. Scenarios whose events are much heavier
than gossip's should record with a smaller ``--snapshot-every``.

**The choice log** (CHOICES frames, ``record_choices=True``, ``run --record-choices``) is off by
default: choices are a pure function of (seed, branch key, node, site, index), so a replay on the
same code draws them again, and logging every draw cost 60% of the kernel's time on gossip (0.85 us
a choice in ``ctx.choose`` plus its encoding). It is for reruns on changed code that want to match
the recorded choices by site.

**Quiet snapshots** (``snapshot_quiet_ns``, SNAPSHOT_QUIET_NS_DEFAULT = 1 ms; 0 or None turns them
off; the header says which): in a world of at least QUIET_SNAPSHOT_NODES_MIN nodes, the recorder
also takes a snapshot where the next event is at least that much simulated time after the last one,
if at least 1/16 of the interval's events ran since the previous snapshot. Seeks are to times, and a run's time is mostly such gaps (a training step's
compute: 97% of a 10,000-rank tree recording's time, with 11 of its 14 interval snapshots inside the
all-reduce bursts), so a seek into a gap restores the snapshot taken at its start and re-executes
nothing, where it re-executed up to 1,800 events on 1,800 privately decoded ranks before. The
kernel pauses at every multiple of ``snapshot_quiet_ns`` of simulated time (``pause_every_ns``):
a pause changes nothing in the run, and the snapshot's place depends only on the event times, so
the recording stays a function of its inputs. Such a snapshot may fall inside a chain batch: its
manifest carries the open batch, as the final snapshot's does.
"""

from __future__ import annotations

import functools
import os
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from timetravel import __version__
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.recording.compact import FINAL_GROUP
from timetravel.recording.compress_ahead import COMPRESS_AHEAD_CORES_MIN
from timetravel.recording.format import (
    FORMAT_VERSION,
    FrameType,
)
from timetravel.recording.open_batch import OpenBatchChunks
from timetravel.recording.snapshot_frames import within_budget, write_pulled, write_snapshot
from timetravel.recording.write_thread import InlineWrites, WriteThread
from timetravel.recording.writer import RecordingWriter
from timetravel.sim.choices import Overrides
from timetravel.sim.encoding import PAGE_BYTES
from timetravel.sim.event import Event
from timetravel.sim.fingerprint import code_fingerprint, platform_fingerprint
from timetravel.sim.kernel import (
    CHAIN_BATCH_EVENTS_DEFAULT,
    CHAIN_DIGEST_INITIAL,
    RunResult,
    Simulation,
    chain_digest_after,
    pack_chain_batch,
)
from timetravel.sim.launch import Launch
from timetravel.sim.runner import public_failure
from timetravel.sim.scenario import Scenario
from timetravel.sim.world import World
from timetravel.snapshot.changes import Changes
from timetravel.snapshot.store import Snapshot, SnapshotStore

SNAPSHOT_EVERY_EVENTS_DEFAULT = 2 * CHAIN_BATCH_EVENTS_DEFAULT
COPY_ON_WRITE_NOTE = "copy-on-write check failed"
"""How the warning NOTE of a run whose handler changed another node's state begins: readers that
rely on the rule (a Session sharing decoded node states between seeks) check for it."""
SNAPSHOT_EVERY_EVENTS_MIN = 64
SNAPSHOT_QUIET_NS_DEFAULT = 1_000_000
"""A quiet snapshot is taken where simulated time is about to jump by at least this much (1 ms)
with no event between: see the module docstring's quiet snapshots."""
QUIET_SNAPSHOT_NODES_MIN = 4096
"""Quiet snapshots are taken in worlds of at least this many nodes: there a seek's restore and
re-execution cost most (a first seek into a 10,000-rank snapshot decodes every rank, and one
re-executed from a burst's last interval snapshot also runs 1,800 events on privately decoded
ranks); below it a whole interval re-executes in tens of ms, and on the 16-rank demo, whose every
10 ms step has a gap of a few ms, quiet snapshots took 103 snapshots instead of 9 (78 MB instead of
18, 2.9 s instead of 1.3 s)."""
QUIET_SNAPSHOT_FRACTION = 16
"""A quiet snapshot needs at least 1/16 of the interval's events since the previous snapshot, so
they add at most 16x the snapshots of a run whose gaps are that frequent (a gossip run has none)."""


def recording_header(
    scenario: Scenario,
    world: World,
    *,
    snapshot_every_events: int,
    chain_batch_events: int,
    overrides: Overrides | None,
    snapshot_quiet_ns: int = 0,
) -> dict[str, Any]:
    """The HEADER frame: what a reader needs to find the code and check it is the same."""
    return {
        "format": list(FORMAT_VERSION),
        "timetravel": __version__,
        "scenario": scenario.name,
        "scenario_module": scenario.build.__module__,
        "config": world.config,
        "seed": world.seed,
        "branch_key": world.branch_key,
        "display_unit": world.display_unit,
        "code_fingerprint": code_fingerprint(scenario.build.__module__),
        "platform_fingerprint": platform_fingerprint(),
        "snapshot_every_events": snapshot_every_events,
        "snapshot_quiet_ns": snapshot_quiet_ns,
        "chain_batch_events": chain_batch_events,
        "page_bytes": PAGE_BYTES,
        "overrides": [[node, site, index, value] for (node, site, index), value in (overrides or {}).items()],
    }


def check_snapshot_interval(snapshot_every_events: int) -> None:
    if snapshot_every_events < SNAPSHOT_EVERY_EVENTS_MIN:
        raise ValueError(f"snapshot interval must be at least {SNAPSHOT_EVERY_EVENTS_MIN} events")


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the OS tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


class Recorder:
    """Runs a world while recording it. See the module docstring."""

    def __init__(
        self,
        scenario: Scenario,
        world: World,
        path: str | Path,
        *,
        snapshot_every_events: int = SNAPSHOT_EVERY_EVENTS_DEFAULT,
        snapshot_quiet_ns: int | None = SNAPSHOT_QUIET_NS_DEFAULT,
        overrides: Overrides | None = None,
        record_choices: bool = False,
        branch: str = MAIN_BRANCH,
        writer: RecordingWriter | None = None,
        determinism: str | None = None,
        simulation_factory: Callable[..., Simulation] | None = None,
        background_writes: bool | None = None,
        compress_ahead: bool | None = None,
        launch: Launch | None = None,
        replace: bool = False,
        max_record_bytes: int | None = None,
    ) -> None:
        """``launch``: what the user named (sim/launch.py), for the default Simulation of a scenario
        whose worlds run their code. ``simulation_factory(world, **options)`` builds the Simulation that runs ``world`` (the
        explore engine passes its session's ``simulation``, so that a world source whose worlds own
        external processes runs them; explore/world_source.py). None: ``Simulation(scenario, ...)``.
        ``background_writes``: write frames on a writer thread (None: when the scenario's worlds own
        external processes; write_thread.py says why). ``compress_ahead``: with inline writes, compress
        frames on a second thread (None: when the process may use COMPRESS_AHEAD_CORES_MIN cores;
        compress_ahead.py says why). ``replace``: record over a file that exists at ``path``
        (``--force``; recording/replace.py), else one is refused. ``max_record_bytes``: keep the file
        within this many bytes by dropping kept states of the past (``--max-record-bytes``:
        recording/compact.py)."""
        check_snapshot_interval(snapshot_every_events)
        self.scenario = scenario
        self.world = world
        self.branch = branch
        self.snapshot_every_events = snapshot_every_events
        large = len(world.nodes) >= QUIET_SNAPSHOT_NODES_MIN
        self.snapshot_quiet_ns = max(snapshot_quiet_ns or 0, 0) if large else 0
        """The effective gap (0: no quiet snapshots, as in a world of fewer nodes than
        QUIET_SNAPSHOT_NODES_MIN); the header records it."""
        self.quiet_events_min = max(snapshot_every_events // QUIET_SNAPSHOT_FRACTION, 1)
        self.snapshot_events = -1
        """events_processed at the latest snapshot (a quiet pause on an interval's never takes two)."""
        self.choice_log: list[list[Any]] | None = [] if record_choices else None
        self.choices_written = 0
        self.store = SnapshotStore(bytes_max=0)
        self.max_record_bytes = max_record_bytes
        self.kept_states = 0
        self.elide_bytes_min = scenario.snapshot_elide_bytes_min
        """Arrays of more bytes are stored as page digests (sim/elided.py) but in the final snapshot."""
        self.changes: Changes | None = None
        """What ran since the latest snapshot, gathered as each batch is flushed (snapshot/changes.py)."""
        self.notes: list[str] = []
        self.open_batch = OpenBatchChunks()
        """The open chain batch's chunks a manifest names (open_batch.py)."""
        build = simulation_factory or functools.partial(Simulation, scenario, launch=launch)
        self.simulation = build(
            world,
            overrides=overrides,
            choice_log=self.choice_log,
            on_chain_batch=self._on_batch,
            determinism=determinism,
        )
        self.writer = (
            writer
            if writer is not None
            else RecordingWriter.create(path, self._header(overrides), replace=replace)
        )
        self.path = self.writer.final_path
        self.pulls = self._state_pulls()
        self.write_thread = self._writes(background_writes, compress_ahead)
        """Writes every frame after the header, in order: a thread beside a run whose world owns
        external processes, inline otherwise (write_thread.py says why)."""
        self.snapshot()

    def _state_pulls(self) -> Any:
        """The bytes of arrays the World holds elided that this recording keeps (a torch run's
        training state at the steps it keeps: torch/world/state_pull.py), or None. A snapshot is
        taken where such a step is stored in the World (``_on_pause``)."""
        record_state = getattr(self.simulation.processes, "record_state", None)
        return record_state() if callable(record_state) else None

    def _writes(self, background: bool | None, compress_ahead: bool | None) -> WriteThread | InlineWrites:
        """How frames after the header are written (see ``__init__``'s ``background_writes`` and
        ``compress_ahead``), abandoned with the recorder if nobody finishes it."""
        if background is None:
            background = self.scenario.world_source is not None
        writes = (WriteThread if background else InlineWrites)(f"timetravel writer {self.path.name}")
        weakref.finalize(self, writes.abandon)
        if compress_ahead is None:
            compress_ahead = usable_cores() >= COMPRESS_AHEAD_CORES_MIN
        if compress_ahead and not background:
            self.writer.compress_ahead()  # zstd on another core, frames still in order (compress_ahead.py)
        return writes

    def _header(self, overrides: Overrides | None) -> dict[str, Any]:
        """The header of a new recording of this run."""
        header = recording_header(
            self.scenario,
            self.world,
            snapshot_every_events=self.snapshot_every_events,
            chain_batch_events=self.simulation.chain_batch_events,
            overrides=overrides,
            snapshot_quiet_ns=self.snapshot_quiet_ns,
        )
        header["determinism"] = self.simulation.determinism
        return header

    # -- the run ----------------------------------------------------------------------------------

    def run(self, until_ns: int | None = None, max_events: int | None = None) -> RunResult:
        """Run (like ``Simulation.run``) with a snapshot every ``snapshot_every_events`` events and
        one at the start of every quiet gap (the module docstring)."""
        return self.simulation.run(
            until_ns,
            max_events,
            pause_every_events=1 if self.pulls is not None else self.snapshot_every_events,
            pause_every_ns=self.snapshot_quiet_ns or None,
            on_pause=self._on_pause,
        )

    def run_to_end(
        self, until_ns: int | None = None, max_events: int | None = None
    ) -> tuple[RunResult, dict[str, Any]]:
        """:meth:`run`, then :meth:`finish`: the result and the END record. Interrupted by any
        exception, the recording is closed by :meth:`abort` (what was written stays readable)."""
        try:
            result = self.run(until_ns, max_events)
        except BaseException:
            self.abort()
            raise
        return result, self.finish(result)

    def flush(self) -> None:
        """Write every frame so far and flush the file to the OS, waiting for the writer thread (and
        raise its error, if a write failed): a reader opening the file then sees all of it."""
        self.write_thread.submit(functools.partial(self.writer.sync, durable=False))
        self.write_thread.drain()

    def _on_pause(self, _simulation: Simulation) -> None:
        world = self.world
        processed = world.events_processed
        if processed == self.snapshot_events:
            return
        kept_state = self.pulls is not None and self.pulls.due(world)
        if processed % self.snapshot_every_events and not kept_state and not self._quiet_ahead(world):
            return
        self.snapshot()

    def _quiet_ahead(self, world: World) -> bool:
        """A quiet pause: the next event is ``snapshot_quiet_ns`` or more after the last one, and
        enough events ran since the previous snapshot."""
        if not self.snapshot_quiet_ns or not world.queue:
            return False
        if world.events_processed - self.snapshot_events < self.quiet_events_min:
            return False
        return bool(world.queue[0][0] - world.t_ns >= self.snapshot_quiet_ns)

    def _on_batch(self, first: int, events: list[Event], digest: bytes) -> None:
        # The changes first, while the batch's events are still in the cache from its packing:
        # after the EVENTS frame's compression they were read from memory (9-15 ms a demo run).
        assert self.changes is not None, "a batch before the first snapshot"
        self.changes.add(events, first)
        packed = self.simulation.chain_batch_bytes  # a new bytes object per batch: the job owns it
        self.write_thread.submit(
            functools.partial(
                self.writer.events, self.branch, first, packed, len(events), digest, partial=False
            )
        )
        self._write_choices()
        self._write_journal(first)

    def _write_journal(self, first: int) -> None:
        """What the run's processes handed the World since the last batch (a torch run's journal:
        torch/world/journal.py), in a JOURNAL frame named by the batch it goes with."""
        if self.pulls is None:
            return
        records = self.simulation.processes.take_journal()
        if records:
            payload = {"branch": self.branch, "first": first, "records": records}
            self._write(FrameType.JOURNAL, payload)

    def _write_choices(self) -> None:
        log = self.choice_log
        if log:
            payload = {"branch": self.branch, "first": self.choices_written, "entries": list(log)}
            self.write_thread.submit(functools.partial(self.writer.frame, FrameType.CHOICES, payload))
            self.choices_written += len(log)
            del log[:]

    def _write(self, frame_type: FrameType, payload: dict[str, Any]) -> None:
        self.write_thread.submit(functools.partial(self.writer.frame, frame_type, payload))

    # -- snapshots --------------------------------------------------------------------------------

    def snapshot(self, *, full: bool = False, final: bool = False) -> Snapshot:
        """Take a snapshot now; the writer thread writes its new blobs and manifest (write_snapshot)."""
        if self.pulls is not None:
            pulled = self.pulls.take_arrays()
            if pulled:
                self.kept_states += 1
                group = FINAL_GROUP if final else f"state{self.kept_states}"
                self.write_thread.submit(functools.partial(write_pulled, self.writer, pulled, group))
            if self.max_record_bytes is not None:
                budget = functools.partial(within_budget, self.writer, self.max_record_bytes, self.notes)
                self.write_thread.submit(budget)
        # every array's bytes at the end, and at a branch's fork (its re-executions start there)
        keep_all = (final or (self.branch != MAIN_BRANCH and not self.store.snapshots)) and (
            self.elide_bytes_min is not None
        )
        changes = None if full or keep_all or not self.store.snapshots else self.changes
        if changes is not None:
            changes.add(self.world.chain_batch, self.world.chain_events)
        elide = None if keep_all else self.elide_bytes_min
        snapshot = self.store.take(self.world, changes=changes, elide_bytes_min=elide)
        self.snapshot_events = self.world.events_processed
        self.changes = Changes(snapshot.seq, snapshot.events)
        open_digests, open_chunks = self.open_batch.chunks(snapshot.chain_events, snapshot.chain_open)
        manifest = snapshot.manifest(open_digests)
        manifest["branch"] = self.branch
        manifest["final"] = final
        # The store empties new_items and bases at its next take: the job keeps its own references.
        job = functools.partial(
            write_snapshot, self.writer, list(snapshot.new_items), dict(snapshot.bases), manifest, open_chunks
        )
        self.write_thread.submit(job)
        return snapshot

    def finish(self, result: RunResult) -> dict[str, Any]:
        """Write the open batch, the final snapshot, failures and the END frame; close the file."""
        world = self.world
        # The open batch is packed once, for its EVENTS frame and the chain head.
        open_bytes = pack_chain_batch(world.chain_batch) if world.chain_batch else b""
        chain_digest = world.chain_digest or CHAIN_DIGEST_INITIAL
        if world.chain_batch:
            chain_digest = chain_digest_after(chain_digest, open_bytes)
            job = functools.partial(
                self.writer.events,
                self.branch,
                world.chain_events,
                open_bytes,
                len(world.chain_batch),
                chain_digest,
                partial=True,
            )
            self.write_thread.submit(job)
        self._write_choices()
        self._final_state()
        snapshot = self.snapshot(final=True)
        state_hash = world.state_hash()  # once: it hashes every node (~2 ms for the demo's 16 ranks)
        if snapshot.state_hash != state_hash:
            note = (
                f"{COPY_ON_WRITE_NOTE} at event #{world.events_processed}: a handler changed "
                "state outside its own node; the final snapshot was re-encoded in full"
            )
            self.notes.append(note)
            self._write(FrameType.NOTE, {"branch": self.branch, "level": "warning", "message": note})
            self.snapshot(full=True, final=True)
        for failure in world.failures[:1]:
            self._write(
                FrameType.FAILURE,
                {"branch": self.branch, "event": world.events_processed, "failure": public_failure(failure)},
            )
        end = {
            "branch": self.branch,
            "stop": result.stop,
            "outcome": result.outcome,
            "failure": public_failure(result.failure),
            "events": world.events_processed,
            "t_end_ns": world.t_ns,
            "state_hash": state_hash,
            "hash_chain": chain_digest.hex(),
        }
        self._write(FrameType.END, end)
        if self.max_record_bytes is not None:  # the whole file, its index and trailer to come too
            budget = functools.partial(
                within_budget, self.writer, self.max_record_bytes, self.notes, closing=True
            )
            self.write_thread.submit(budget)
        try:
            self.write_thread.submit(self.writer.close)
            self.write_thread.drain()
        finally:
            self.write_thread.stop()
        return end

    def _final_state(self) -> None:
        """The arrays this recording keeps at the end (a torch run's last state of every rank), and a
        NOTE for each that could not be kept; then the processes are no longer asked for any."""
        pulls = self.pulls
        if pulls is None:
            return
        processes = self.simulation.processes
        processes.final_state(self.world)
        self._write_journal(self.world.chain_events)
        processes.recording_ended(pulls)
        for text in pulls.notes:
            self.notes.append(text)
            self._write(FrameType.NOTE, {"branch": self.branch, "level": "info", "message": text})

    def abort(self) -> None:
        """Close after an interruption: what was written stays readable, without an END frame
        (what was queued for the writer thread is written first, unless a write failed)."""
        self.write_thread.stop()
        if not self.writer.closed:
            self.writer.close()
