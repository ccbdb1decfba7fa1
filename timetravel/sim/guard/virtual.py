"""Simulated clock and entropy: the values a guarded handler sees instead of the machine's.

* **Time** is logical: the wall clock reads ``VIRTUAL_EPOCH_NS + ctx.now`` (2000-01-01T00:00:00Z
  plus the simulated time), the monotonic, performance and CPU clocks read ``ctx.now``. The
  simulated machine's local time zone is UTC, so the answer never depends on the host's TZ.
* **Entropy** is drawn through the world's choices, keyed by the handling node and a site per
  API family (``guard.random``, ``guard.urandom``, ...), exactly like ``ctx.choose``. So every
  virtualized random value is in the choice log, can be pinned by an override and shrinks towards
  the canonical 0 (``random.random()`` -> 0.0, ``os.urandom(n)`` -> n zero bytes). In the
  end-of-run hook (no node) the world-level streams are used.
"""

from __future__ import annotations

import calendar
import datetime as datetime_module
import random
import time
import uuid
from typing import Any

from timetravel.sim.choices import choose_world
from timetravel.sim.guard.state import ACTIVE, suspended

VIRTUAL_EPOCH_NS = 946_684_800 * 1_000_000_000
"""Simulated time 0 on the virtual wall clock: 2000-01-01T00:00:00Z (a date that looks simulated)."""
VIRTUAL_EPOCH = datetime_module.datetime(2000, 1, 1, tzinfo=datetime_module.UTC)
RANDOM_BYTES_MAX = 1 << 20
"""Largest os.urandom/randbytes request served from choices (one choice per 8 bytes)."""

SITE_RANDOM = "guard.random"
SITE_RANDOM_SEED = "guard.random.seed"
SITE_URANDOM = "guard.urandom"
SITE_UUID1 = "guard.uuid1"
SITE_UUID4 = "guard.uuid4"
SITE_NUMPY = "guard.numpy.random"

_UUID_EPOCH_OFFSET_100NS = 0x01B21DD213814000
"""100-ns intervals from 1582-10-15 (the UUID epoch) to 1970-01-01."""
_FLOAT_BITS = 53
_WORD_BITS = 64


def draw(context: Any, site: str, bound: int) -> int:
    """One choice in ``[0, bound)`` at ``site`` for the node being handled (world stream if none)."""
    if context.node:
        return int(context.choose(site, bound))
    return choose_world(context.world, site, bound, context.overrides)


def draw_bits(context: Any, site: str, bits: int) -> int:
    """``bits`` random bits as an int, one choice per 64 bits (most significant word first)."""
    if bits < 0:
        raise ValueError("number of bits must be non-negative")
    value = 0
    remaining = bits
    while remaining > 0:
        width = min(remaining, _WORD_BITS)
        value = (value << width) | draw(context, site, 1 << width)
        remaining -= width
    return value


def random_bytes(context: Any, site: str, size: int) -> bytes:
    """``size`` bytes drawn from choices (all zero when every choice is canonical)."""
    if size < 0:
        raise ValueError("negative argument not allowed")
    if size > RANDOM_BYTES_MAX:
        raise ValueError(f"a guarded handler may draw at most {RANDOM_BYTES_MAX} random bytes at once")
    words = [draw(context, site, 1 << _WORD_BITS).to_bytes(8, "little") for _ in range((size + 7) // 8)]
    return b"".join(words)[:size]


# -- clocks -------------------------------------------------------------------------------------


def wall_ns(context: Any) -> int:
    return VIRTUAL_EPOCH_NS + int(context.now)


def wall_seconds(context: Any) -> float:
    return wall_ns(context) / 1e9


def logical_ns(context: Any) -> int:
    return int(context.now)


def logical_seconds(context: Any) -> float:
    return int(context.now) / 1e9


def wall_datetime(context: Any) -> datetime_module.datetime:
    """Aware UTC datetime of the virtual wall clock, exact to the microsecond."""
    return VIRTUAL_EPOCH + datetime_module.timedelta(microseconds=int(context.now) // 1000)


def struct_time_utc(context: Any, seconds: float | None) -> time.struct_time:
    """``time.localtime``/``gmtime`` of the simulated machine (which lives in UTC)."""
    return time.gmtime(wall_seconds(context) if seconds is None else seconds)


def mktime_utc(struct: Any) -> float:
    """``time.mktime`` on a UTC machine."""
    return float(calendar.timegm(tuple(struct)[:9]))


# -- random -------------------------------------------------------------------------------------


class ChoiceRandom(random.Random):
    """A ``random.Random`` whose every bit comes from choices at site ``guard.random``.

    Only ``random()`` and ``getrandbits()`` draw; every other method (randint, choice, shuffle,
    gauss, ...) is the stdlib's own code on top of them, so the distributions are the real ones.
    ``seed`` is ignored: the values are already a function of the simulation's seed.
    """

    def seed(self, *args: Any, **kwargs: Any) -> None:
        return None

    def random(self) -> float:
        return draw(ACTIVE.context, SITE_RANDOM, 1 << _FLOAT_BITS) * (2.0**-_FLOAT_BITS)

    def getrandbits(self, k: int) -> int:
        return draw_bits(ACTIVE.context, SITE_RANDOM, k)

    def randbytes(self, n: int) -> bytes:
        return random_bytes(ACTIVE.context, SITE_RANDOM, n)

    def getstate(self) -> Any:
        raise NotImplementedError("the virtual generator has no state of its own")

    def setstate(self, state: Any) -> None:
        raise NotImplementedError("the virtual generator has no state of its own")


def virtual_random() -> ChoiceRandom:
    """This thread's ChoiceRandom, with the gauss cache cleared (no value survives a call)."""
    instance = ACTIVE.random_instance
    if instance is None:
        with suspended():  # created once per thread: nothing it does may depend on the world
            instance = ACTIVE.random_instance = ChoiceRandom()
    instance.gauss_next = None
    return instance


def random_seed(context: Any) -> int:
    """Seed for a ``random.Random()`` created without one inside a handler."""
    return draw(context, SITE_RANDOM_SEED, 1 << _WORD_BITS)


def numpy_state(context: Any) -> Any:
    """A legacy RandomState seeded by one 32-bit choice: what ``np.random.<function>`` calls use.

    One choice per call (not per value): ``np.random.rand(10**6)`` stays one draw in the log,
    and the values still replay and shrink with that choice (0 seeds RandomState(0)).
    """
    import numpy as np

    state = ACTIVE.numpy_state
    if state is None:
        with suspended():  # RandomState() draws OS entropy while constructing: keep it out of the world
            state = ACTIVE.numpy_state = np.random.RandomState(0)
    state.seed(draw(context, SITE_NUMPY, 1 << 32))
    return state


# -- uuid ---------------------------------------------------------------------------------------


def uuid1(context: Any, node: int | None = None, clock_seq: int | None = None) -> uuid.UUID:
    """RFC 4122 version 1 from the virtual wall clock; node and clock sequence from choices."""
    timestamp = wall_ns(context) // 100 + _UUID_EPOCH_OFFSET_100NS
    if clock_seq is None:
        clock_seq = draw(context, SITE_UUID1, 1 << 14)
    if node is None:
        node = virtual_node(context)
    time_low = timestamp & 0xFFFFFFFF
    time_mid = (timestamp >> 32) & 0xFFFF
    time_hi_version = (timestamp >> 48) & 0x0FFF
    clock_seq_low = clock_seq & 0xFF
    clock_seq_hi_variant = (clock_seq >> 8) & 0x3F
    fields = (time_low, time_mid, time_hi_version, clock_seq_hi_variant, clock_seq_low, node)
    return uuid.UUID(fields=fields, version=1)


def virtual_node(context: Any) -> int:
    """A 48-bit node id with the multicast bit set, as RFC 4122 asks of random node ids."""
    return draw(context, SITE_UUID1, 1 << 48) | (1 << 40)


def uuid4(context: Any) -> uuid.UUID:
    return uuid.UUID(bytes=random_bytes(context, SITE_UUID4, 16), version=4)


def as_class(cls: Any, value: Any) -> Any:
    """``value`` (a date or datetime) as an instance of ``cls``, the (sub)class the call was made on
    (``MyDatetime.now()`` answers a MyDatetime)."""
    if type(value) is cls:
        return value
    if issubclass(cls, datetime_module.datetime):
        return cls.combine(value.date(), value.timetz())
    return cls(value.year, value.month, value.day)
