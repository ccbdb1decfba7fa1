"""What a run *did*, as opposed to what it was asked to do: effects keys and per-event effects.

Two futures of one moment differ on purpose in their fault schedule, config and branch key; the
question a divergence search asks is where they first *behave* differently. Two measures:

* :func:`effects_key` of a whole world, for bisecting snapshots: the world's Merkle root without
  config, faults and choice keys (``World.effects_hash``), and also without what only numbers the
  schedule: event sequence numbers (a branch that adds a fault schedules events, which shifts
  every later ``seq``), pending ``fault`` events, and the fabric's fault bookkeeping that holds
  no effect yet (``fault_id_max``, zero hit counters). Equal keys mean equal behaviour so far.
* :class:`Stepper`, for stepping two worlds side by side: one event at a time, it records the
  event's key ``(t, kind, dst, payload digest)`` — events are matched by it, never by ``seq`` —
  and the event's **effects**: the destination's state after it, the events it scheduled (by
  key), what it appended to metrics, log and failures, and which top-level parts of the fabric
  and of ``down`` it changed. :func:`effects_difference` says whether two steps did the same.
  Comparing *what changed* rather than whole worlds keeps a difference that was there before (a
  fault rule a branch removed) from being blamed on every later event that merely reads it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from timetravel.sim.encoding import digest, merkle_root
from timetravel.sim.event import Event
from timetravel.sim.kernel import Simulation
from timetravel.sim.world import PART_NAMES_EXCLUDED_FROM_EFFECTS, QUEUE_SUM_MODULUS, World

FAULT_EVENT_KIND = "fault"
SCHEDULE_BOOKKEEPING_KEYS = ("fault_id_max",)
END_KIND = "end"
"""Kind of the pseudo-event for end-of-run checks (run when the queue drains)."""

EventKey = tuple[int, str, str, bytes]


def event_key(event: Event | tuple[Any, ...]) -> EventKey:
    """``(t, kind, dst, payload digest)``: how events of two runs are matched."""
    return (event[0], event[3], event[2], digest(event[4]))


def queue_key(queue: list[Event]) -> bytes:
    """The pending events as a multiset of keys (no seq), without pending fault events."""
    total = 0
    count = 0
    for event in queue:
        if event[3] == FAULT_EVENT_KIND:
            continue
        total += int.from_bytes(digest([event[0], event[2], event[3], event[4]]), "little")
        count += 1
    return digest([count, (total % QUEUE_SUM_MODULUS).to_bytes(16, "little")])


def fabric_key(fabric: dict[str, Any]) -> bytes:
    """The fabric's digest without schedule bookkeeping (see the module docstring)."""
    if "fault_hits" not in fabric:
        return digest(fabric)
    trimmed = {key: value for key, value in fabric.items() if key not in SCHEDULE_BOOKKEEPING_KEYS}
    trimmed["fault_hits"] = {key: hits for key, hits in fabric["fault_hits"].items() if hits}
    return digest(trimmed)


def effects_key(world: World) -> bytes:
    """A digest of what the world's run did so far (see the module docstring)."""
    parts = [
        (name, part_digest)
        for name, part_digest in world.part_digests()
        if name not in PART_NAMES_EXCLUDED_FROM_EFFECTS and name not in ("clock", "queue", "fabric")
    ]
    parts.append(("clock", digest([world.t_ns, world.events_processed])))
    parts.append(("queue", queue_key(world.queue)))
    parts.append(("fabric", fabric_key(world.fabric)))
    return merkle_root(parts)


def global_digests(world: World) -> dict[str, bytes]:
    """Digests of the parts an event may change besides its node: each fabric key and ``down``."""
    found = {f"fabric/{key}": digest(value) for key, value in world.fabric.items()}
    found["down"] = digest(world.down)
    return found


@dataclass(frozen=True)
class StepEffects:
    """One processed event (or the end-of-run checks, kind ``end``) and what it did."""

    event: Event
    number: int
    """The event's number on its run (#N)."""
    node_digest: bytes
    scheduled: tuple[EventKey, ...]
    metrics_added: bytes
    log_added: bytes
    failures_added: tuple[str, ...]
    """Signatures of the failures the event recorded."""
    before: dict[str, bytes]
    after: dict[str, bytes]

    @property
    def key(self) -> EventKey:
        return event_key(self.event)


class Stepper:
    """Runs a world one event at a time and says what each event did."""

    def __init__(self, world: World, simulation: Simulation) -> None:
        """``simulation`` re-executes ``world``: the caller builds it through its run's world source
        (``session.simulation``), unchained (a Stepper compares effects, not the hash chain)."""
        self.world = world
        self.simulation = simulation
        self.globals = global_digests(world)
        self.ended = False

    def peek(self) -> Event | None:
        """The next event (None when the queue is empty, or the run failed or ended)."""
        world = self.world
        if world.failures or self.ended or not world.queue:
            return None
        return world.queue[0]

    @property
    def finished(self) -> bool:
        return bool(self.world.failures) or self.ended

    def step(self) -> StepEffects:
        """Process the next event, or the end-of-run checks when the queue is empty."""
        world = self.world
        event = self.peek()
        if event is None:
            event = Event(world.t_ns, -1, "", END_KIND, None)
        seq_before = world.seq
        metric_lengths = {name: len(series) for name, series in world.metrics.items()}
        log_length, log_dropped = len(world.log), world.log_dropped
        failures_before = len(world.failures)
        self.simulation.run(max_events=1)
        if event[3] == END_KIND and event[1] == -1:
            self.ended = True
        appended = [
            [name, series[metric_lengths.get(name, 0) :]]
            for name, series in world.metrics.items()
            if len(series) != metric_lengths.get(name, 0)
        ]
        dropped_since = world.log_dropped - log_dropped
        log_added = world.log[max(0, log_length - dropped_since) :]
        failures_added = tuple(
            f"{failure.get('signature')} on {failure.get('node')}"
            for failure in world.failures[failures_before:]
        )
        before = self.globals
        self.globals = global_digests(world)
        node = world.nodes.get(event[2])
        return StepEffects(
            event=event,
            number=world.events_processed,
            node_digest=digest(node) if node is not None else b"",
            scheduled=tuple(sorted(event_key(e) for e in world.queue if e[1] >= seq_before)),
            metrics_added=digest(appended),
            log_added=digest(log_added),
            failures_added=failures_added,
            before=before,
            after=self.globals,
        )


def effects_difference(a: StepEffects, b: StepEffects) -> str | None:
    """Why two steps with the same event key did different things (None: they did the same)."""
    node = a.event[2] or "the world"
    if a.node_digest != b.node_digest:
        return f"the state of {node} differs after it"
    if a.scheduled != b.scheduled:
        return "it scheduled other events: " + _first_scheduled_difference(a.scheduled, b.scheduled)
    if a.failures_added != b.failures_added:
        return f"its failures differ (a: {_failures_text(a)}; b: {_failures_text(b)})"
    if a.metrics_added != b.metrics_added:
        return "it recorded different metric points"
    if a.log_added != b.log_added:
        return "it logged different lines"
    for part in sorted(set(a.after) | set(b.after)):
        changed = a.before.get(part) != a.after.get(part) or b.before.get(part) != b.after.get(part)
        if changed and a.after.get(part) != b.after.get(part):
            return f"it changed {part} differently"
    return None


def _first_scheduled_difference(a: tuple[EventKey, ...], b: tuple[EventKey, ...]) -> str:
    """``a: grad to r3 at t=95487 ns, b: grad to r3 at t=95484 ns`` for the first pair that differs."""
    for key_a, key_b in zip(a, b, strict=False):
        if key_a != key_b:
            return f"a: {_scheduled_text(key_a)}; b: {_scheduled_text(key_b)}"
    longer, side = (a, "a") if len(a) > len(b) else (b, "b")
    return f"only {side}: {_scheduled_text(longer[min(len(a), len(b))])}"


def _scheduled_text(key: EventKey) -> str:
    t_ns, kind, dst, payload_digest = key
    return f"{kind} to {dst} at t={t_ns} ns (payload {payload_digest.hex()[:8]})"


def _failures_text(step: StepEffects) -> str:
    return ", ".join(step.failures_added) or "none"
