"""The rank's logical clock: the one time source every clock read inside a rank process sees.

Inside a rank, ``time.time()``, ``time.perf_counter()``, ``datetime.now()`` and their relatives
read a :class:`RankClock` (see :mod:`timetravel.torch.rank.env.virtual_time`). The runtime owns it:
it charges compute with :meth:`RankClock.advance` and, when a collective completes in the World,
moves the clock to the completion time with :meth:`RankClock.set`. ``time.sleep`` advances it
without waiting.

Epochs (integer nanoseconds, never floats):

* the **monotonic** clocks (``monotonic``, ``perf_counter``, ``process_time``, ``thread_time``) read
  ``now_ns()`` itself: 0 when the rank starts;
* the **wall** clock (``time.time``, ``datetime.now``) reads ``wall_epoch_ns + now_ns()``. The
  default epoch is the determinism guard's ``VIRTUAL_EPOCH_NS``, 2000-01-01T00:00:00Z, so a rank
  and a simulated handler agree on what simulated time 0 looks like on a calendar (a date that
  looks simulated on purpose). The simulated machine lives in UTC.
"""

from __future__ import annotations

from timetravel.sim.guard.virtual import VIRTUAL_EPOCH_NS

WALL_EPOCH_NS = VIRTUAL_EPOCH_NS
"""Wall-clock reading at logical time 0: 2000-01-01T00:00:00Z, in ns since the Unix epoch."""


class ClockError(ValueError):
    """A clock move that would break the clock's contract (backwards, or not an integer)."""


def _check_ns(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ClockError(f"{what} must be an integer number of nanoseconds, not {type(value).__name__}")
    return value


class RankClock:
    """One rank's logical time in integer ns; it only moves forwards.

    The patched clocks call :meth:`now_ns` at every read (nothing is cached), so a runtime that
    wants to charge compute lazily may subclass this and override :meth:`now_ns`.
    """

    __slots__ = ("_now_ns", "wall_epoch_ns")

    def __init__(self, start_ns: int = 0, *, wall_epoch_ns: int = WALL_EPOCH_NS) -> None:
        self._now_ns = _check_ns(start_ns, "start_ns")
        if start_ns < 0:
            raise ClockError(f"start_ns must be >= 0, got {start_ns}")
        self.wall_epoch_ns = _check_ns(wall_epoch_ns, "wall_epoch_ns")

    def now_ns(self) -> int:
        """The rank's logical time: what ``time.monotonic_ns()`` returns inside the rank."""
        return self._now_ns

    def wall_ns(self) -> int:
        """What ``time.time_ns()`` returns inside the rank: the wall epoch plus logical time."""
        return self.wall_epoch_ns + self.now_ns()

    def advance(self, ns: int) -> int:
        """Move forwards by ``ns`` >= 0 (compute charged, a ``time.sleep``); returns the new time."""
        _check_ns(ns, "advance")
        if ns < 0:
            raise ClockError(f"a clock advances by ns >= 0, got {ns}")
        self._now_ns += ns
        return self._now_ns

    def set(self, t_ns: int) -> None:
        """Jump to ``t_ns`` (a collective completed at that World time); never backwards."""
        _check_ns(t_ns, "set")
        if t_ns < self._now_ns:
            raise ClockError(f"the clock cannot go back from {self._now_ns} ns to {t_ns} ns")
        self._now_ns = t_ns

    def __repr__(self) -> str:
        return f"RankClock(now_ns={self._now_ns})"
