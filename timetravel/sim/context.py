"""The handler's only door to the world: ``ctx``.

A handler is ``handler(state, event, ctx)``. It changes its own node's ``state`` and acts on the
rest of the world only through ``ctx``: send a message, set a timer, draw a choice, record a
metric, log, or fail. One Context is reused for every event (the kernel re-points ``node``,
``state`` and ``now`` before each call), so calling a handler allocates nothing.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from heapq import heappush
from typing import TYPE_CHECKING, Any

import numpy as np
import xxhash

from timetravel.sim import speedups
from timetravel.sim.choices import CHOICE_BOUND_MAX, CHOICE_COUNTERS_KEY, Overrides, check_bound, stream_base
from timetravel.sim.event import Event, make_event
from timetravel.sim.failure import make_failure
from timetravel.sim.world import LOG_ENTRIES_MAX

if TYPE_CHECKING:
    from timetravel.sim.world import World

Transport = Callable[["Context", str, str, Any, int], None]
"""``transport(ctx, dst, kind, payload, nbytes)``: decides when (and whether) a message arrives."""

LATENCY_NS_DEFAULT = 1_000
"""Fixed one-way latency of the kernel's own transport (the fabric replaces it with a model)."""
CHANCE_RESOLUTION = 1 << 32

_pack_index = struct.Struct("<Q").pack
INDEX_BYTES_CACHED = 1 << 14
_INDEX_BYTES = [_pack_index(index) for index in range(INDEX_BYTES_CACHED)]
"""The 8-byte little-endian form of the first draw indices: a list index costs a third of ``pack``."""
_hash64 = xxhash.xxh3_64_intdigest
_IMMUTABLE_TYPES = frozenset({type(None), bool, int, float, str, bytes})


def freeze(value: Any) -> Any:
    """A copy of ``value`` that the receiver cannot use to reach the sender's state.

    Scalars are shared; containers are copied; numpy arrays are copied and made read-only, so
    no two nodes ever share a mutable array.
    """
    kind = type(value)
    if kind in _IMMUTABLE_TYPES:
        return value
    if kind is np.ndarray:
        if not value.flags.writeable and value.base is None:
            return value
        frozen = value.copy()
        frozen.flags.writeable = False
        return frozen
    if kind is list:
        return [freeze(item) for item in value]
    if kind is tuple:
        return tuple(freeze(item) for item in value)
    if kind is dict:
        return {key: freeze(item) for key, item in value.items()}
    raise TypeError(f"{kind.__name__} is not plain data and cannot be sent")


def fixed_latency_transport(ctx: Context, dst: str, kind: str, payload: Any, nbytes: int) -> None:
    """The kernel's own network until a fabric is attached: a fixed latency plus a jitter choice.

    ``world.fabric["latency_ns"]`` (default LATENCY_NS_DEFAULT) and ``world.fabric["jitter_ns"]``
    (default 0): the jitter is drawn at site ``net.jitter`` in ``[0, jitter_ns]``.
    """
    fabric = ctx.world.fabric
    delay_ns = fabric.get("latency_ns", LATENCY_NS_DEFAULT)
    jitter_ns = fabric.get("jitter_ns", 0)
    if jitter_ns:
        delay_ns += ctx.choose("net.jitter", jitter_ns + 1)
    ctx.deliver(ctx.now + delay_ns, dst, kind, payload)


class PythonContextCore:
    """The Context's fields and its hot methods (``deliver``, ``timer``, ``choose``) in Python.

    This is the reference implementation. When the compiled core is built
    (:mod:`timetravel.sim.speedups`), ``Context`` derives from its C twin instead, which gives the
    same bits and calls back into these methods for every rare path (overrides, bad arguments).
    """

    __slots__ = (
        "_stream_bases",
        "choice_log",
        "event",
        "node",
        "now",
        "overrides",
        "queue",
        "state",
        "transport",
        "world",
    )
    world: World
    transport: Transport
    overrides: Overrides | None
    choice_log: list[list[Any]] | None
    now: int
    queue: list[Event]
    node: str
    event: Event | None
    state: dict[str, Any]
    _stream_bases: dict[str, dict[str, int]]

    if TYPE_CHECKING:  # defined on Context, which both cores serve

        def _stream_base(self, node: str, site: str) -> int: ...

        def _log_choice(self, node: str, site: str, index: int, value: int) -> int: ...

    def deliver(self, t_ns: int, dst: str, kind: str, payload: Any = None) -> None:
        """Schedule an event at absolute time ``t_ns``; for transports and fault injectors."""
        if type(t_ns) is not int or t_ns < self.now:
            raise ValueError(f"delivery time must be an int >= now ({self.now}), got {t_ns!r}")
        world = self.world
        seq = world.seq
        world.seq = seq + 1
        heappush(self.queue, make_event(Event, (t_ns, seq, dst, kind, payload)))

    def timer(self, delay_ns: int, kind: str, payload: Any = None) -> None:
        """Deliver event ``kind`` to this node after ``delay_ns`` nanoseconds."""
        if type(delay_ns) is not int or delay_ns < 0:
            raise ValueError(f"timer delay must be a non-negative int of nanoseconds, got {delay_ns!r}")
        world = self.world
        seq = world.seq
        world.seq = seq + 1
        heappush(self.queue, make_event(Event, (self.now + delay_ns, seq, self.node, kind, payload)))

    def choose(self, site: str, bound: int) -> int:
        """Draw an int in ``[0, bound)`` at ``site``; 0 is the canonical (simplest) value."""
        if bound < 1 or bound > CHOICE_BOUND_MAX:
            check_bound(bound)
        counters = self.state[CHOICE_COUNTERS_KEY]
        try:
            index = counters[site]
        except KeyError:
            index = 0
        counters[site] = index + 1
        node = self.node
        if self.overrides is not None:
            pinned = self.overrides.get((node, site, index))
            if pinned is not None:
                return self._log_choice(node, site, index, pinned % bound)
        try:
            base = self._stream_bases[node][site]
        except KeyError:
            base = self._stream_base(node, site)
        packed = _INDEX_BYTES[index] if index < INDEX_BYTES_CACHED else _pack_index(index)
        value = (_hash64(packed, base) * bound) >> 64
        if self.choice_log is not None:
            self.choice_log.append([node, site, index, value])
        return value


def _compiled_core() -> type:
    """The compiled ContextCore, handed the Python objects it builds on."""
    assert speedups.compiled is not None
    speedups.compiled.configure(
        Event,
        _hash64,
        CHOICE_COUNTERS_KEY,
        PythonContextCore.choose,
        PythonContextCore.timer,
        PythonContextCore.deliver,
    )
    core: type = speedups.compiled.ContextCore
    return core


if TYPE_CHECKING:
    _ContextCore = PythonContextCore
else:
    _ContextCore = PythonContextCore if speedups.compiled is None else _compiled_core()


class Context(_ContextCore):
    """What a handler may do. See the module docstring."""

    __slots__ = ("processes",)

    def __init__(
        self,
        world: World,
        *,
        transport: Transport = fixed_latency_transport,
        overrides: Overrides | None = None,
        choice_log: list[list[Any]] | None = None,
    ) -> None:
        self.world = world
        self.transport = transport
        self.overrides = overrides or None
        self.choice_log = choice_log
        self.now = world.t_ns
        self.queue = world.queue
        self.node = ""
        self.event = None
        self.state = {}
        self._stream_bases = {}
        self.processes: Any = None
        """The owner of the run's external processes (``Scenario.processes``), None for plain data."""

    @property
    def event_kind(self) -> str:
        """Kind of the event being handled ("end" in end-of-run hooks)."""
        return self.event[3] if self.event is not None else "end"

    @property
    def role(self) -> str:
        """Role of the node being handled."""
        return self.world.roles.get(self.node, "")

    @property
    def config(self) -> dict[str, Any]:
        """The scenario's config (read it, never change it)."""
        return self.world.config

    def forget_stream_keys(self) -> None:
        """Drop cached stream keys (after the seed or branch key of the world changed)."""
        self._stream_bases.clear()

    # -- time and messages (``deliver`` and ``timer`` are in the core) ---------------------------

    def send(self, dst: str, kind: str, payload: Any = None, nbytes: int = 0) -> None:
        """Send a message of ``nbytes`` bytes to node ``dst``; it arrives as event ``kind``."""
        if dst not in self.world.nodes:
            raise KeyError(f"send to unknown node {dst!r}")
        self.transport(self, dst, kind, freeze(payload), nbytes)

    # -- choices (``choose`` is in the core) -----------------------------------------------------

    def _stream_base(self, node: str, site: str) -> int:
        """The stream key of ``(node, site)``, computed once and cached (the slow path of ``choose``)."""
        bases = self._stream_bases.get(node)
        if bases is None:
            bases = self._stream_bases[node] = {}
        base = bases[site] = stream_base(self.world.seed, self.world.branch_key, node, site)
        return base

    def _log_choice(self, node: str, site: str, index: int, value: int) -> int:
        """Log a pinned choice (called by ``choose`` on its override path)."""
        if self.choice_log is not None:
            self.choice_log.append([node, site, index, value])
        return value

    def chance(self, site: str, probability: float) -> bool:
        """True with ``probability``; the canonical value 0 always gives False (no fault)."""
        if not 0.0 <= probability <= 1.0:
            raise ValueError(f"probability must be in [0, 1], got {probability!r}")
        threshold = CHANCE_RESOLUTION - int(probability * CHANCE_RESOLUTION)
        value = self.choose(site, CHANCE_RESOLUTION)
        return value >= threshold and (value != 0 or probability >= 1.0)

    def order(self, site: str, items: list[Any]) -> list[Any]:
        """A permutation of ``items`` drawn at ``site``; all-zero choices keep the given order."""
        remaining = list(items)
        ordered = []
        while remaining:
            ordered.append(remaining.pop(self.choose(site, len(remaining)) if len(remaining) > 1 else 0))
        return ordered

    # -- observations ---------------------------------------------------------------------------

    def metric(self, name: str, value: Any) -> None:
        """Append ``value`` to the metric ``name`` with the current time and node."""
        series = self.world.metrics.get(name)
        if series is None:
            series = self.world.metrics[name] = []
        series.append([self.now, self.node, value])

    def log(self, message: str) -> None:
        """Append a line to the world's bounded log."""
        log = self.world.log
        if len(log) >= LOG_ENTRIES_MAX:
            dropped = len(log) // 2
            del log[:dropped]
            self.world.log_dropped += dropped
        log.append([self.now, self.node, message])

    def fail(self, kind: str, message: str, site: str | None = None, node: str | None = None) -> None:
        """Record a failure; the run stops after this event.

        ``site`` names the detector or place in the code (digits are normalized away, so no rank
        leaks into the signature); it defaults to the handler, ``role.event_kind``.
        """
        where = site if site is not None else f"{self.role}.{self.event_kind}"
        self.world.failures.append(make_failure(kind, node or self.node or None, self.now, message, where))
