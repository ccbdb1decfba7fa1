"""The kernel: pop the earliest event, hand it to its node's handler, repeat.

This is the hot loop users wait on, so it is written for CPython: locals instead of attribute
lookups, one reused Context, no allocation per event beyond the events handlers schedule, and the
garbage collector paused while it runs (the world is acyclic data; pausing gains 20-30%).

Every processed event is appended to the current *chain batch*. When a batch holds
``chain_batch_events`` events it is encoded with msgpack and hashed with xxh3-128, chained to the
previous digest. Hashing in batches costs ~0.1 us an event where hashing each event on its own
would halve the kernel's speed; a recording stores the batch digests and a replay that finds a
mismatching batch re-runs it event by event to name the first event that differs.

The determinism guard (``timetravel.sim.guard``) is switched on around each run segment and the
end-of-run hook, on this thread only, and off around the chain-batch observer: the hot loop itself
pays nothing per event for it.
"""

from __future__ import annotations

import gc
import heapq
import traceback
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import xxhash

from timetravel.sim import guard, speedups
from timetravel.sim.choices import Overrides
from timetravel.sim.context import Context, fixed_latency_transport
from timetravel.sim.encoding import pack
from timetravel.sim.event import Event
from timetravel.sim.failure import make_failure
from timetravel.sim.launch import NO_LAUNCH, Launch
from timetravel.sim.scenario import NotAuthorizedError, Scenario
from timetravel.sim.world import World

CHAIN_BATCH_EVENTS_DEFAULT = 4096
YOUNG_PROMOTED_MIN = 100_000
"""Young allocations from which a run promotes its survivors unscanned (:func:`promote_survivors`)."""
CHAIN_DIGEST_INITIAL = bytes(16)
TIME_NS_MAX = (1 << 63) - 1
DELIVERED_WHEN_DOWN = "fault"
"""The one event kind a crashed node still receives: the fault events that restart it."""

STOP_DRAINED = "drained"
STOP_UNTIL = "until"
STOP_MAX_EVENTS = "max_events"
STOP_FAILURE = "failure"

COMPILED_STOP_UNHANDLED = 4
COMPILED_STOP_RAISED = 5
COMPILED_STOPS = (None, STOP_DRAINED, STOP_UNTIL, STOP_FAILURE, STOP_FAILURE, STOP_FAILURE)
"""The compiled loop's stop codes (see _speedups.c) as the Python loop's stop values."""

ChainBatchCallback = Callable[[int, list[Event], bytes], None]
"""``callback(first_event_number, events, digest_after)`` for every flushed chain batch."""
PauseCallback = Callable[["Simulation"], None]


@dataclass(frozen=True)
class RunResult:
    """Why a run stopped and where the world stands."""

    stop: str
    outcome: str
    failure: dict[str, Any] | None
    events: int
    t_end_ns: int


class Simulation:
    """A World bound to its scenario's code. Holds no simulation state of its own.

    The only things here that are not in the World are caches derived from it (the dispatch
    table, stream keys) and observers (the chain-batch callback, the optional choice log).
    Which nodes ran since a point is not tracked here: it is the set of ``dst`` of the events
    processed since then, which the chain batches already hold (the snapshot store reads them).
    """

    def __init__(
        self,
        scenario: Scenario,
        world: World,
        *,
        overrides: Overrides | None = None,
        choice_log: list[list[Any]] | None = None,
        chain: bool = True,
        chain_batch_events: int = CHAIN_BATCH_EVENTS_DEFAULT,
        on_chain_batch: ChainBatchCallback | None = None,
        determinism: str | None = None,
        launch: Launch | None = None,
        processes: Any = None,
    ) -> None:
        """``determinism``: the guard's mode (virtualize, forbid, off); None takes the scenario's.

        For a scenario whose worlds run external processes (``Scenario.processes``): ``processes`` is
        their owner, handed in by whoever owns them (a Session's world source); without it the
        Simulation makes its own from ``launch`` (what the user named: sim/launch.py), owns it, and
        closes it when the run can go no further (the queue drained or a failure) or at :meth:`close`."""
        if chain_batch_events < 1:
            raise ValueError("chain_batch_events must be at least 1")
        if not world.chain_digest:
            world.chain_digest = CHAIN_DIGEST_INITIAL
        self.scenario = scenario
        self.world = world
        self.chain = chain
        self.chain_batch_events = chain_batch_events
        self.on_chain_batch = on_chain_batch
        self.chain_batch_bytes = b""
        """The msgpack bytes of the batch last flushed (what its digest covers), for recorders:
        read it inside ``on_chain_batch`` to store the batch without encoding it a second time."""
        self.ctx = Context(
            world,
            transport=scenario.transport or fixed_latency_transport,
            overrides=overrides,
            choice_log=choice_log,
        )
        self._owns_processes = processes is None and scenario.processes is not None
        self._closer: weakref.finalize[Any, Any] | None = None
        if self._owns_processes:
            assert scenario.processes is not None
            processes = scenario.processes(launch or NO_LAUNCH)
            # a Simulation dropped before its run ended (a stepper, a trace window) still ends them
            self._closer = weakref.finalize(self, processes.close)
        self.processes = processes
        self.ctx.processes = processes
        self._tables: dict[str, Any] = {}
        self.determinism = guard.check_mode(scenario.determinism if determinism is None else determinism)
        if self.determinism != guard.MODE_OFF:
            guard.install()

    # -- running --------------------------------------------------------------------------------

    def run(
        self,
        until_ns: int | None = None,
        max_events: int | None = None,
        *,
        pause_every_events: int | None = None,
        pause_every_ns: int | None = None,
        on_pause: PauseCallback | None = None,
    ) -> RunResult:
        """Run until the queue drains, a failure, ``until_ns`` or ``max_events`` more events.

        ``until_ns`` follows the seek rule: every event with ``t <= until_ns`` runs, then the
        clock reads ``until_ns``. With ``pause_every_events``, ``on_pause`` is called whenever
        the number of processed events reaches a multiple of it (snapshots hang off this). With
        ``pause_every_ns``, ``on_pause`` is also called whenever the run is about to cross a
        multiple of it in simulated time: every event up to that time has run and the next one is
        later (the clock reads the last event's time, as at any pause). A gap between two events at
        least that long always holds one such pause (the recorder's quiet snapshots hang off this).
        Pausing never changes the run: the order of events is (t, seq) whatever the heap's layout.
        """
        world = self.world
        until = TIME_NS_MAX if until_ns is None else until_ns
        limit = TIME_NS_MAX if max_events is None else world.events_processed + max_events
        if world.failures:
            self.close()
            return self._result(STOP_FAILURE)
        was_enabled = gc.isenabled()
        gc.disable()
        try:
            while True:
                segment_limit = limit
                if pause_every_events:
                    next_pause = (world.events_processed // pause_every_events + 1) * pause_every_events
                    segment_limit = min(limit, next_pause)
                segment_until = until
                if pause_every_ns and world.queue:
                    # the first multiple at or after the next event: the segment runs at least it
                    time_pause = -(-world.queue[0][0] // pause_every_ns) * pause_every_ns
                    segment_until = min(until, time_pause)
                stop = self._guarded_segment(segment_limit, segment_until)
                if stop == STOP_UNTIL and segment_until < until:
                    stop = None
                if stop is not None or world.events_processed >= limit:
                    break
                if on_pause is not None:
                    on_pause(self)
        except BaseException:
            self.close()  # interrupted (Ctrl-C, a farm's budget): what this Simulation started ends
            raise
        finally:
            if was_enabled:
                promote_survivors()
                gc.enable()
        stop = stop or STOP_MAX_EVENTS
        if stop == STOP_UNTIL:
            world.t_ns = max(world.t_ns, until)
        if stop == STOP_DRAINED and not world.failures:
            self._end_of_run()
        if stop == STOP_DRAINED or world.failures:
            self.close()  # nothing more can run: the processes this Simulation owns end here
        return self._result(STOP_FAILURE if world.failures else stop)

    def close(self) -> None:
        """End the external processes this Simulation owns (none for plain-data scenarios, and none
        when they were handed in: their owner ends them). Safe to call twice."""
        if self._closer is not None:
            self._closer()

    def _guarded_segment(self, limit: int, until: int) -> str | None:
        """One run segment with the guard on for this thread (only handlers run here meanwhile)."""
        previous = guard.enter(self.ctx, self.determinism)
        try:
            return self._run_segment(limit, until)
        finally:
            guard.leave(previous)

    def _run_segment(self, limit: int, until: int) -> str | None:
        world = self.world
        if (
            speedups.compiled is not None
            and type(world.queue) is list
            and type(world.nodes) is dict
            and type(world.chain_batch) is list
        ):
            return self._run_segment_compiled(limit, until)
        return self._run_segment_python(limit, until)

    def _run_segment_compiled(self, limit: int, until: int) -> str | None:
        """The loop below, run by the compiled core (same bits; see timetravel.sim.speedups)."""
        world = self.world
        batch_length = len(world.chain_batch)
        stop, processed, t, detail = speedups.compiled.run_segment(  # type: ignore[union-attr]
            self.ctx,
            world,
            world.queue,
            world.nodes,
            world.down,
            world.failures,
            world.chain_batch,
            self._tables,
            self.chain,
            world.events_processed,
            limit,
            world.events_processed + self.chain_batch_events - batch_length,
            self.chain_batch_events,
            until,
            self._flush_chain_at,
            self._handler,
        )
        world.events_processed = processed
        world.t_ns = t
        if stop == COMPILED_STOP_UNHANDLED:
            self._unhandled(detail)
        elif stop == COMPILED_STOP_RAISED:
            self._handler_raised(detail)
        return COMPILED_STOPS[stop]

    def _flush_chain_at(self, processed: int) -> None:
        """The compiled loop's call when a chain batch is full (``processed`` events so far)."""
        self.world.events_processed = processed
        self._flush_chain()

    def _run_segment_python(self, limit: int, until: int) -> str | None:
        # Written for CPython 3.11: try blocks cost nothing until they catch, so lookups that
        # almost always hit are subscripts guarded by ``except KeyError`` rather than ``.get``;
        # an Event is a tuple subclass, which indexing reads faster than unpacking does.
        world = self.world
        queue = world.queue
        pop = heapq.heappop
        nodes = world.nodes
        down = world.down
        failures = world.failures
        append = world.chain_batch.append
        batch_length = len(world.chain_batch)
        chain = self.chain
        next_flush = world.events_processed + self.chain_batch_events - batch_length
        ctx = self.ctx
        tables = self._tables
        processed = world.events_processed
        t = world.t_ns
        stop = None
        try:
            while processed < limit:
                try:
                    event = pop(queue)
                except IndexError:
                    stop = STOP_DRAINED
                    break
                t_event = event[0]
                if t_event > until:
                    heapq.heappush(queue, event)
                    stop = STOP_UNTIL
                    break
                t = ctx.now = t_event
                processed += 1
                if chain:
                    append(event)
                    if processed >= next_flush:
                        world.events_processed = processed
                        self._flush_chain()
                        next_flush = processed + self.chain_batch_events
                dst = event[2]
                kind = event[3]
                if down and dst in down and kind != DELIVERED_WHEN_DOWN:
                    continue
                try:
                    handler = tables[dst][kind]
                except KeyError:
                    handler = self._handler(dst, kind)
                    if handler is None:
                        world.t_ns = t
                        self._unhandled(event)
                        stop = STOP_FAILURE
                        break
                state = nodes[dst]
                ctx.node = dst
                ctx.state = state
                ctx.event = event
                handler(state, event, ctx)
                if failures:
                    stop = STOP_FAILURE
                    break
        except Exception as error:  # a handler raised: that is a bug found, not a kernel crash
            world.t_ns = t
            self._handler_raised(error)
            stop = STOP_FAILURE
        finally:
            world.events_processed = processed
            world.t_ns = t
        return stop

    def _handler(self, dst: str, kind: str) -> Any:
        """The handler of ``kind`` at ``dst`` when the cached dispatch missed, or None if it has none."""
        table = self._tables.get(dst)
        if table is None:
            table = self._table(dst)
        return table.get(kind)

    def _table(self, dst: str) -> Any:
        role = self.world.roles.get(dst)
        if role is None:
            raise KeyError(f"event for unknown node {dst!r}")
        handlers = self.scenario.handlers.get(role)
        if handlers is None:
            raise KeyError(f"scenario {self.scenario.name} has no handlers for role {role!r}")
        self._tables[dst] = handlers
        return handlers

    def _unhandled(self, event: Event) -> None:
        role = self.world.roles.get(event.dst, "?")
        message = f"node {event.dst} (role {role}) has no handler for event kind {event.kind!r}"
        self.world.failures.append(
            make_failure("unhandled", event.dst, event.t, message, f"{role}.{event.kind}")
        )

    def _handler_raised(self, error: Exception) -> None:
        if isinstance(error, NotAuthorizedError):
            raise error  # the host refused to start code the user did not name: not the run's failure
        ctx = self.ctx
        role = self.world.roles.get(ctx.node, "?")
        frames = [
            frame
            for frame in traceback.extract_tb(error.__traceback__)
            if not guard.is_guard_file(frame.filename)
        ]
        where = f" at {frames[-1].filename}:{frames[-1].lineno} in {frames[-1].name}" if frames else ""
        if isinstance(error, guard.DeterminismError):
            where = ""  # its message names the user's call site already
        message = f"{type(error).__name__}: {error}{where}"
        site = f"{role}.{ctx.event_kind}:{type(error).__name__}"
        self.world.failures.append(make_failure("exception", ctx.node or None, ctx.now, message, site))

    def _end_of_run(self) -> None:
        on_end = self.scenario.on_end
        if on_end is None:
            return
        ctx = self.ctx
        ctx.node = ""
        ctx.state = {}
        ctx.event = None
        ctx.now = self.world.t_ns
        previous = guard.enter(ctx, self.determinism)
        try:
            on_end(self.world, ctx)
        except Exception as error:  # an oracle that raises is a finding, like a handler that raises
            self._handler_raised(error)
        finally:
            guard.leave(previous)

    def _result(self, stop: str) -> RunResult:
        world = self.world
        return RunResult(
            stop=stop,
            outcome="fail" if world.failures else "pass",
            failure=world.failures[0] if world.failures else None,
            events=world.events_processed,
            t_end_ns=world.t_ns,
        )

    # -- the hash chain -------------------------------------------------------------------------

    def _flush_chain(self) -> None:
        world = self.world
        batch = world.chain_batch
        first = world.chain_events
        packed = pack_chain_batch(batch)
        world.chain_digest = chain_digest_after(world.chain_digest, packed)
        world.chain_events += len(batch)
        if self.on_chain_batch is not None:
            self.chain_batch_bytes = packed
            with guard.suspended():  # observers (recorders, checkers) are not handlers
                self.on_chain_batch(first, list(batch), world.chain_digest)
        batch.clear()

    def chain_head(self) -> str:
        """Hex digest of the chain over every event processed so far (partial batch included)."""
        return chain_head(self.world)


def promote_survivors(young_min: int | None = None) -> None:
    """Move what the run left in the collector's young generations to the oldest one, unscanned.

    With the collector paused, every container a handler allocated and kept stays young, and the
    first allocation after ``gc.enable()`` would scan them all in one young collection that finds
    nothing to free (the world is acyclic data; a 10,000-rank tree run leaves ~1.3 million such
    objects: 150 ms, 3% of its run). ``gc.freeze()`` then ``gc.unfreeze()`` moves every tracked
    object to the oldest generation in O(1) and zeroes the young count: what a generational
    collector would do with long-lived data, without the scan. A cycle made during the run is
    still freed, by the next full collection. Skipped after small runs (seeks, steps) and when the
    program froze objects itself (``unfreeze`` would release them too). No simulated bit depends on it.
    """
    if young_min is None:
        young_min = YOUNG_PROMOTED_MIN
    if gc.get_count()[0] >= young_min and gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()


def pack_chain_batch(events: list[Event]) -> bytes:
    """``encoding.pack(events)``, by the compiled core when it is built (same bytes, a few times faster).

    msgpack-python spends ~2,000 instructions an event on a batch of events (type dispatch per
    item); the core writes the common shape (int t and seq, str dst and kind, a None, int or str
    payload) directly and packs any other payload with ``encoding.pack``.
    """
    compiled = speedups.compiled
    if compiled is not None and type(events) is list:
        packed: bytes | None = compiled.pack_events(events, pack)
        if packed is not None:
            return packed
    return pack(events)


def chain_digest_after(previous: bytes, packed: bytes) -> bytes:
    """The chain digest after a packed batch: xxh3-128 of the previous digest followed by the
    batch's bytes, hashed as a stream rather than over their concatenation (the same digest, without
    copying a batch of ~1.9 MB once more to prepend 16 bytes: 39 against 87 us a batch)."""
    hasher = xxhash.xxh3_128()
    hasher.update(previous)
    hasher.update(packed)
    return hasher.digest()


def chain_step(previous: bytes, events: list[Event]) -> bytes:
    """The chain digest after ``events``: xxh3-128 of the previous digest and the batch."""
    return chain_digest_after(previous, pack_chain_batch(events))


def chain_head(world: World) -> str:
    """Hex digest over every event the world has processed, the open batch included."""
    digest = world.chain_digest or CHAIN_DIGEST_INITIAL
    if world.chain_batch:
        digest = chain_step(digest, world.chain_batch)
    return digest.hex()
