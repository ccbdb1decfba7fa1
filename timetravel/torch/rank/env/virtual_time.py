"""Clock virtualization inside a rank process: every clock the script reads is the RankClock.

``install_time(clock)`` replaces, in the ``time`` module: ``time``/``time_ns`` (wall: the clock's
wall epoch plus logical time), ``monotonic``, ``perf_counter``, ``process_time``, ``thread_time``
and their ``_ns`` forms (logical time, 0 at rank start), ``clock_gettime(_ns)`` (``CLOCK_REALTIME``
reads the wall clock, every other clock id logical time), ``localtime``/``gmtime``/``ctime``/
``asctime``/``strftime`` when called without a time (the logical wall clock), and ``sleep``, which
advances logical time by the duration and returns at once. ``datetime.datetime.now``/``utcnow``
and ``datetime.date.today`` (so ``datetime.today`` too) read the logical wall clock: datetime is a
C type, so the classmethods are replaced in the type itself (the determinism guard's technique,
CPython only), which also covers ``from datetime import datetime`` done before installing.

The simulated machine's time zone is UTC (``TZ=UTC`` and ``time.tzset()``), so local-time output
(``logging``'s asctime, ``datetime.now()``) does not depend on the host.

Limits, documented in docs/torch.md:

* names bound to an original *before* installing are rebound by one scan of the loaded modules;
  a reference kept elsewhere (a default argument, a dict value, a C extension's own clock —
  ``torch.profiler``'s timestamps, ``os.times()``, file modification times) still reads the host;
* the stdlib's blocking primitives (``threading``, ``queue``, ``multiprocessing``'s connections and
  queues, ``subprocess``, ``selectors``, ``concurrent.futures``, asyncio's event loop) keep the real
  clock, whether imported before or after installing: their
  timeouts are real waits on OS primitives, and a deadline on a logical clock that does not move
  while the process waits would never expire. Rank runtime code reads the host with
  :func:`real_monotonic_ns`.
"""

from __future__ import annotations

import datetime as datetime_module
import os
import sys
import time
import types
from collections.abc import Callable
from typing import Any

from timetravel.sim.guard.virtual import as_class
from timetravel.torch.rank.env.clock import RankClock
from timetravel.torch.rank.env.patching import Installation, Patches, when_imported
from timetravel.torch.rank.errors import the_scripts

NS_PER_SECOND = 1_000_000_000
REAL_CLOCK_MODULES = (
    "threading",
    "queue",
    "selectors",
    "subprocess",
    "multiprocessing.connection",
    "multiprocessing.queues",
    "multiprocessing.synchronize",
    "multiprocessing.pool",
    "multiprocessing.managers",
    "concurrent.futures._base",
    "asyncio.base_events",
)
"""Stdlib modules whose timeouts are real waits: they keep the host's clock (see the module doc)."""
OWN_PREFIXES = ("timetravel.", "_pytest.", "pluggy.")
"""Never rebound: timetravel's own modules (the runtime measures the host where it must) and the
test runner's (pytest times its tests on the host clock, also when a test runs a rank in-process)."""

_REAL_MONOTONIC_NS = time.monotonic_ns
_REAL_TIME_NS = time.time_ns


def real_monotonic_ns() -> int:
    """The host's monotonic clock, for rank runtime code (watchdogs), never for the script."""
    return _REAL_MONOTONIC_NS()


def real_time_ns() -> int:
    """The host's wall clock, for rank runtime code, never for the script."""
    return _REAL_TIME_NS()


def sleep_ns(seconds: Any) -> int:
    """Nanoseconds of ``time.sleep(seconds)``, with the errors the real sleep raises."""
    if not isinstance(seconds, int | float):
        if hasattr(type(seconds), "__float__"):
            seconds = float(seconds)
        elif hasattr(type(seconds), "__index__"):
            seconds = int(seconds)
        else:
            raise the_scripts(
                TypeError(f"'{type(seconds).__name__}' object cannot be interpreted as an integer")
            )
    if seconds != seconds:
        raise the_scripts(ValueError("Invalid value NaN (not a number)"))
    if seconds < 0:
        raise the_scripts(ValueError("sleep length must be non-negative"))
    if isinstance(seconds, int):
        return seconds * NS_PER_SECOND
    return round(seconds * NS_PER_SECOND)


def _real_time_namespace(module: types.ModuleType) -> types.SimpleNamespace:
    """A stand-in for the ``time`` module with the host's clocks, for REAL_CLOCK_MODULES."""
    return types.SimpleNamespace(**vars(module))


def install_time(clock: RankClock, *, time_zone: str | None = "UTC") -> Installation:
    """Make every clock the rank's script reads the logical ``clock`` (see the module docstring)."""
    patches = Patches()
    real_time = _real_time_namespace(time)
    real_functions = {id(value): value for value in vars(time).values() if callable(value)}

    def seconds(read_ns: Callable[[], int]) -> Callable[[], float]:
        return lambda: read_ns() / NS_PER_SECOND

    clocks: dict[str, Callable[[], Any]] = {
        "time": seconds(clock.wall_ns),
        "time_ns": clock.wall_ns,
    }
    for name in ("monotonic", "perf_counter", "process_time", "thread_time"):
        clocks[name] = seconds(clock.now_ns)
        clocks[f"{name}_ns"] = clock.now_ns
    for name, read in clocks.items():
        patches.wrap(time, name, _returning(_clock_function(read)))

    def clock_ns(clock_id: int) -> int:
        return clock.wall_ns() if clock_id in _wall_clock_ids() else clock.now_ns()

    patches.wrap(time, "clock_gettime_ns", lambda original: clock_ns)
    patches.wrap(time, "clock_gettime", lambda original: lambda clock_id: clock_ns(clock_id) / NS_PER_SECOND)

    def sleep(seconds_value: Any) -> None:
        clock.advance(sleep_ns(seconds_value))

    patches.wrap(time, "sleep", lambda original: sleep)
    _patch_calendar_functions(patches, clock)
    if time_zone is not None:
        _set_time_zone(patches, time_zone)
    _patch_datetime(patches, clock)
    patches.rebind_aliases(skip_prefixes=(*OWN_PREFIXES, *REAL_CLOCK_MODULES))
    originals = {id(time.__dict__[name]): real_time.__dict__[name] for name in vars(real_time)}
    for module_name in REAL_CLOCK_MODULES:
        when_imported(
            patches,
            module_name,
            lambda module: _keep_real_clock(patches, module, real_time, originals, real_functions),
        )
    return Installation("time", patches, clock)


def _keep_real_clock(
    patches: Patches,
    module: types.ModuleType,
    real_time: types.SimpleNamespace,
    originals: dict[int, Any],
    real_functions: dict[int, Any],
) -> None:
    """A blocking-primitive module reads the host clock: its ``time`` and its clock aliases are the real ones.

    A module imported before installing holds the real functions already; one imported after
    (``from time import monotonic as time`` in ``queue``) picked up the logical clock and gets the
    real function back.
    """
    for name, value in list(module.__dict__.items()):
        if value is time:
            patches.replace(module, name, real_time, aliases=False)
        elif id(value) in originals and id(value) not in real_functions:
            patches.replace(module, name, originals[id(value)], aliases=False)


def _returning(replacement: Any) -> Callable[[Any], Any]:
    """A ``make`` for :meth:`Patches.wrap` that ignores the original."""

    def make(original: Any) -> Any:
        return replacement

    return make


def _clock_function(read: Callable[[], Any]) -> Callable[[], Any]:
    def patched() -> Any:
        return read()

    return patched


def _wall_clock_ids() -> tuple[int, ...]:
    names = ("CLOCK_REALTIME", "CLOCK_REALTIME_COARSE", "CLOCK_TAI")
    return tuple(getattr(time, name) for name in names if hasattr(time, name))


def _patch_calendar_functions(patches: Patches, clock: RankClock) -> None:
    """localtime/gmtime/ctime/asctime/strftime without a time argument read the logical wall clock."""
    real_localtime, real_gmtime = time.localtime, time.gmtime
    real_asctime, real_strftime = time.asctime, time.strftime

    def wall_seconds() -> float:
        return clock.wall_ns() / NS_PER_SECOND

    def localtime(seconds_value: float | None = None) -> time.struct_time:
        return real_localtime(wall_seconds() if seconds_value is None else seconds_value)

    def gmtime(seconds_value: float | None = None) -> time.struct_time:
        return real_gmtime(wall_seconds() if seconds_value is None else seconds_value)

    def ctime(seconds_value: float | None = None) -> str:
        return real_asctime(localtime(seconds_value))

    def asctime(struct: Any = None) -> str:
        return real_asctime(localtime() if struct is None else struct)

    def strftime(format_text: str, struct: Any = None) -> str:
        return real_strftime(format_text, localtime() if struct is None else struct)

    for name, replacement in (
        ("localtime", localtime),
        ("gmtime", gmtime),
        ("ctime", ctime),
        ("asctime", asctime),
        ("strftime", strftime),
    ):
        patches.wrap(time, name, _returning(replacement))


def _set_time_zone(patches: Patches, time_zone: str) -> None:
    patches.set_item(os.environ, "TZ", time_zone)
    time.tzset()
    patches.on_undo(time.tzset)


def _patch_datetime(patches: Patches, clock: RankClock) -> None:
    real_datetime = datetime_module.datetime
    utc = datetime_module.UTC

    def wall_utc() -> datetime_module.datetime:
        seconds_value, remainder_ns = divmod(clock.wall_ns(), NS_PER_SECOND)
        moment = real_datetime.fromtimestamp(seconds_value, utc)
        return moment.replace(microsecond=remainder_ns // 1000)

    def now(cls: type, tz: Any = None) -> Any:
        moment = wall_utc()
        local = moment.astimezone(tz) if tz is not None else moment.astimezone().replace(tzinfo=None)
        return as_class(cls, local)

    def utcnow(cls: type) -> Any:
        return as_class(cls, wall_utc().replace(tzinfo=None))

    def today(cls: type) -> Any:
        local = wall_utc().astimezone().replace(tzinfo=None)
        return as_class(cls, local if issubclass(cls, real_datetime) else local.date())

    replaced = [
        patches.replace_type_attribute(real_datetime, "now", classmethod(now)),
        patches.replace_type_attribute(real_datetime, "utcnow", classmethod(utcnow)),
        patches.replace_type_attribute(datetime_module.date, "today", classmethod(today)),
    ]
    if not all(replaced):  # pragma: no cover - only a non-CPython interpreter refuses
        print(f"timetravel: datetime clocks are not simulated on {sys.implementation.name}", file=sys.stderr)
