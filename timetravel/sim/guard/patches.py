"""Install the guard's patches, once per process.

Each patched function first reads this thread's guard slot. Off (every thread but the kernel's
while a segment runs): it calls the real function, so other threads and code outside handlers are
untouched. On: it returns a simulated value (virtualize mode), or raises DeterminismError naming
the call site (forbid mode, and always for calls that cannot be simulated: threads, real sleeps,
asyncio loops, processes, sockets).

How the calls are reached:

* **module functions** (``time.time``, ``os.urandom``, ``random.random``, ``uuid.uuid4``,
  ``numpy.random.rand``, ...) are replaced in their module; then every loaded module is scanned
  once for names bound to an original (``from time import time`` done before installing, the
  ``random`` module's private ``_urandom`` that SystemRandom and ``secrets`` use) and rebound.
  Modules imported later get the patched function from the start.
* **methods** (``threading.Thread.start``, ``random.Random.seed``) are replaced on their class.
* **datetime** is a C type that refuses new attributes: its classmethods (``now``, ``utcnow``,
  ``today``, ``fromtimestamp``) are replaced in the type's dict, and the type's method cache is
  invalidated (CPython only; elsewhere datetime stays a documented leak).
* **C-level I/O** (sockets, DNS, subprocesses, ``os.system``, ``fork``, ``exec``, ``kill``) is
  refused from a ``sys.audit`` hook, which sees those calls however they are reached.
* asyncio and multiprocessing are patched when they are first seen loaded (checked cheaply at
  every activation), so importing timetravel does not import them.
"""

from __future__ import annotations

import datetime as datetime_module
import os
import random
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from timetravel.sim.guard import virtual
from timetravel.sim.guard.state import ACTIVE, violation
from timetravel.sim.guard.wrappers import (
    Maker,
    as_forbidden,
    as_virtualized,
    as_virtualized_clock,
    as_virtualized_when_omitted,
    describe,
    set_type_attribute,
)

OWN_MODULE_PREFIX = "timetravel.sim.guard"
"""The guard's own modules are never rebound: they call the originals."""

ADVICE_CLOCK = "read logical time from ctx.now (or run with --determinism virtualize)"
ADVICE_TIME_ZONE = "the host's time zone is not simulated; pass a tz (or run with --determinism virtualize)"
ADVICE_RANDOM = "draw with ctx.choose/ctx.chance/ctx.order (or run with --determinism virtualize)"
ADVICE_SLEEP = "a handler cannot wait; set a timer with ctx.timer(delay_ns, kind) and continue in its handler"
ADVICE_THREAD = "handlers run one at a time on the kernel's thread; model concurrency as nodes and events"
ADVICE_ASYNCIO = "a handler cannot run an event loop; model each await as an event (ctx.timer, ctx.send)"
ADVICE_PROCESS = "a simulated node starts no real processes; model the work as events"
ADVICE_NETWORK = "a simulated node has no real network; send messages with ctx.send"

AUDIT_FORBIDDEN: dict[str, tuple[str, str]] = {
    "socket.__new__": ("socket.socket", ADVICE_NETWORK),
    "socket.getaddrinfo": ("socket.getaddrinfo", ADVICE_NETWORK),
    "socket.gethostbyname": ("socket.gethostbyname", ADVICE_NETWORK),
    "socket.gethostbyaddr": ("socket.gethostbyaddr", ADVICE_NETWORK),
    "socket.getnameinfo": ("socket.getnameinfo", ADVICE_NETWORK),
    "socket.gethostname": ("socket.gethostname", ADVICE_NETWORK),
    "subprocess.Popen": ("subprocess.Popen", ADVICE_PROCESS),
    "os.system": ("os.system", ADVICE_PROCESS),
    "os.fork": ("os.fork", ADVICE_PROCESS),
    "os.forkpty": ("os.forkpty", ADVICE_PROCESS),
    "os.posix_spawn": ("os.posix_spawn", ADVICE_PROCESS),
    "os.spawn": ("os.spawn", ADVICE_PROCESS),
    "os.exec": ("os.exec", ADVICE_PROCESS),
    "os.kill": ("os.kill", ADVICE_PROCESS),
    "os.killpg": ("os.killpg", ADVICE_PROCESS),
}
"""Audit events refused while a handler runs: the call as users know it, and what to do instead."""

_NUMPY_PASS_THROUGH = ("RandomState", "get_bit_generator", "set_bit_generator", "get_state", "set_state")
_NUMPY_ALIASES = {"ranf": "random_sample", "sample": "random_sample"}
_RANDOM_PASS_THROUGH = ("getstate", "setstate")

_lock = threading.RLock()
_installed = False
_modules_seen = 0
_replacements: dict[int, tuple[Any, Any]] = {}
"""id(original) -> (original, patched) for every patched module function (the alias scan's map)."""
_originals: dict[str, Any] = {}
"""Call label (``"time.time"``) -> the real function, for tests and for the docs' table."""
_uncovered: list[str] = []
"""Patches this interpreter refused (e.g. datetime on a non-CPython): documented leaks."""


def _replace_function(module: Any, name: str, make: Maker, public_module: str = "") -> None:
    original = getattr(module, name, None)
    if original is None:
        return
    label = f"{public_module or module.__name__}.{name}"
    patched = make(label, original)
    describe(patched, original, module.__name__, name)
    setattr(module, name, patched)
    _replacements[id(original)] = (original, patched)
    _originals[label] = original


def _replace_method(cls: type, name: str, make: Maker) -> None:
    original = cls.__dict__[name]
    label = f"{cls.__module__}.{cls.__qualname__}.{name}"
    patched = make(label, original)
    describe(patched, original, cls.__module__, f"{cls.__qualname__}.{name}")
    setattr(cls, name, patched)
    _originals[label] = original


# -- time and datetime --------------------------------------------------------------------------


def _patch_time() -> None:
    clocks: dict[str, Callable[[Any], Any]] = {
        "time": virtual.wall_seconds,
        "time_ns": virtual.wall_ns,
        "monotonic": virtual.logical_seconds,
        "monotonic_ns": virtual.logical_ns,
        "perf_counter": virtual.logical_seconds,
        "perf_counter_ns": virtual.logical_ns,
        "process_time": virtual.logical_seconds,
        "process_time_ns": virtual.logical_ns,
        "thread_time": virtual.logical_seconds,
        "thread_time_ns": virtual.logical_ns,
    }
    for name, simulate in clocks.items():
        _replace_function(time, name, as_virtualized_clock(simulate, ADVICE_CLOCK))
    local_time: dict[str, Callable[..., Any]] = {
        "localtime": lambda context, seconds=None: virtual.struct_time_utc(context, seconds),
        "ctime": lambda context, seconds=None: time.asctime(virtual.struct_time_utc(context, seconds)),
        "mktime": lambda context, struct: virtual.mktime_utc(struct),
    }
    for name, simulate in local_time.items():
        _replace_function(time, name, as_virtualized(simulate, ADVICE_TIME_ZONE))
    now_if_omitted: dict[str, tuple[int, Callable[..., Any]]] = {
        "gmtime": (0, lambda context, *_: virtual.struct_time_utc(context, None)),
        "asctime": (0, lambda context, *_: time.asctime(virtual.struct_time_utc(context, None))),
        "strftime": (
            1,
            lambda context, format_text, *_: time.strftime(
                format_text, virtual.struct_time_utc(context, None)
            ),
        ),
    }
    for name, (position, simulate) in now_if_omitted.items():
        _replace_function(time, name, as_virtualized_when_omitted(position, simulate, ADVICE_CLOCK))
    _replace_function(time, "sleep", as_forbidden(ADVICE_SLEEP))


def _patch_datetime() -> None:
    real_datetime = datetime_module.datetime
    real_date = datetime_module.date
    utc = datetime_module.UTC

    def now(context: Any, cls: type, tz: Any = None) -> Any:
        moment = virtual.wall_datetime(context)
        moment = moment.replace(tzinfo=None) if tz is None else moment.astimezone(tz)
        return virtual.as_class(cls, moment)

    def utcnow(context: Any, cls: type) -> Any:
        return virtual.as_class(cls, virtual.wall_datetime(context).replace(tzinfo=None))

    def today(context: Any, cls: type) -> Any:
        moment = virtual.wall_datetime(context).replace(tzinfo=None)
        return virtual.as_class(cls, moment if issubclass(cls, real_datetime) else moment.date())

    def datetime_fromtimestamp(context: Any, cls: type, seconds: float, tz: Any = None) -> Any:
        return virtual.as_class(cls, real_datetime.fromtimestamp(seconds, utc).replace(tzinfo=None))

    def date_fromtimestamp(context: Any, cls: type, seconds: float) -> Any:
        return virtual.as_class(cls, real_datetime.fromtimestamp(seconds, utc).date())

    patches: list[tuple[type, str, Callable[..., Any], str, int | None]] = [
        (real_datetime, "now", now, ADVICE_CLOCK, None),
        (real_datetime, "utcnow", utcnow, ADVICE_CLOCK, None),
        (real_date, "today", today, ADVICE_CLOCK, None),
        (real_datetime, "fromtimestamp", datetime_fromtimestamp, ADVICE_TIME_ZONE, 1),
        (real_date, "fromtimestamp", date_fromtimestamp, ADVICE_TIME_ZONE, None),
    ]
    for cls, name, simulate, advice, tz_position in patches:
        _patch_type_classmethod(cls, name, simulate, advice, tz_position)


def _patch_type_classmethod(
    cls: type, name: str, simulate: Callable[..., Any], advice: str, tz_position: int | None
) -> None:
    """Replace classmethod ``name`` of the C type ``cls`` in its dict (see the module docstring)."""
    label = f"datetime.{cls.__name__}.{name}"
    descriptor = cls.__dict__[name]

    def patched(klass: type, *args: Any, **kwargs: Any) -> Any:
        context = ACTIVE.context
        given_tz = tz_position is not None and (
            (len(args) > tz_position and args[tz_position] is not None) or kwargs.get("tz") is not None
        )
        if context is None or given_tz:
            return descriptor.__get__(None, klass)(*args, **kwargs)
        if ACTIVE.forbid:
            raise violation(label, advice)
        return simulate(context, klass, *args, **kwargs)

    describe(patched, descriptor, "datetime", f"{cls.__name__}.{name}")
    if set_type_attribute(cls, name, classmethod(patched)):
        _originals[label] = descriptor
    else:
        _uncovered.append(label)


# -- entropy ------------------------------------------------------------------------------------


def _random_function(name: str) -> Callable[..., Any]:
    def simulate(context: Any, *args: Any, **kwargs: Any) -> Any:
        return getattr(virtual.virtual_random(), name)(*args, **kwargs)

    return simulate


def _patch_random() -> None:
    instance = random._inst
    names = [
        name
        for name, value in vars(random).items()
        if getattr(value, "__self__", None) is instance and not name.startswith("_")
    ]
    for name in names:
        if name in _RANDOM_PASS_THROUGH:
            continue
        simulate = (lambda context, *args, **kwargs: None) if name == "seed" else _random_function(name)
        _replace_function(random, name, as_virtualized(simulate, ADVICE_RANDOM))
    _replace_method(random.Random, "seed", _unseeded_random)


def _unseeded_random(label: str, original: Any) -> Callable[..., Any]:
    """``random.Random.seed``: an instance created without a seed inside a handler seeds from a choice."""

    def patched(self: Any, a: Any = None, version: int = 2) -> Any:
        context = ACTIVE.context
        if context is None or a is not None:
            return original(self, a, version)
        if ACTIVE.forbid:
            raise violation("random.Random() without a seed", ADVICE_RANDOM)
        return original(self, virtual.random_seed(context), version)

    return patched


def _patch_os_and_uuid() -> None:
    def urandom(context: Any, size: int, *flags: Any) -> bytes:
        return virtual.random_bytes(context, virtual.SITE_URANDOM, size)

    for name in ("urandom", "getrandom"):
        _replace_function(os, name, as_virtualized(urandom, ADVICE_RANDOM))
    random._urandom = os.urandom  # type: ignore[attr-defined]  # SystemRandom and secrets draw here
    uuids: dict[str, Callable[..., Any]] = {
        "uuid1": virtual.uuid1,
        "uuid4": virtual.uuid4,
        "getnode": virtual.virtual_node,
    }
    for name, simulate in uuids.items():
        _replace_function(uuid, name, as_virtualized(simulate, ADVICE_RANDOM))


def _numpy_function(method: str) -> Callable[..., Any]:
    def simulate(context: Any, *args: Any, **kwargs: Any) -> Any:
        if method == "seed":
            return None  # the legacy global generator is virtual: its values follow the world's seed
        return getattr(virtual.numpy_state(context), method)(*args, **kwargs)

    return simulate


def _patch_numpy() -> None:
    import numpy.random.mtrand as mtrand

    for name in mtrand.__all__:
        if name in _NUMPY_PASS_THROUGH:
            continue
        simulate = _numpy_function(_NUMPY_ALIASES.get(name, name))
        _replace_function(mtrand, name, as_virtualized(simulate, ADVICE_RANDOM), public_module="numpy.random")


# -- what cannot be simulated -------------------------------------------------------------------


def _patch_threads() -> None:
    import _thread

    _replace_method(threading.Thread, "start", as_forbidden(ADVICE_THREAD))
    for name in ("start_new_thread", "start_new"):
        _replace_function(_thread, name, as_forbidden(ADVICE_THREAD))


def _patch_asyncio() -> None:
    import asyncio.events
    import asyncio.runners

    make = as_forbidden(ADVICE_ASYNCIO)
    _replace_function(asyncio.events, "new_event_loop", make, public_module="asyncio")
    _replace_function(asyncio.runners, "run", make, public_module="asyncio")
    _replace_method(asyncio.events.BaseDefaultEventLoopPolicy, "new_event_loop", make)


def _patch_multiprocessing() -> None:
    import multiprocessing.process

    _replace_method(multiprocessing.process.BaseProcess, "start", as_forbidden(ADVICE_PROCESS))


_LAZY_PATCHES: dict[str, Callable[[], None]] = {
    "asyncio.runners": _patch_asyncio,
    "multiprocessing.process": _patch_multiprocessing,
}
"""Module -> patch, applied once the module is loaded (importing them ourselves costs ~30 ms)."""


def _audit(event: str, args: tuple[Any, ...]) -> None:
    entry = AUDIT_FORBIDDEN.get(event)
    if entry is not None and ACTIVE.context is not None:
        raise violation(*entry)


# -- installing ---------------------------------------------------------------------------------


def install() -> None:
    """Install every patch and the audit hook, once per process (thread-safe, idempotent)."""
    global _installed
    if _installed:
        return
    with _lock:
        if _installed:
            return
        _patch_time()
        _patch_datetime()
        _patch_random()
        _patch_os_and_uuid()
        _patch_numpy()
        _patch_threads()
        sys.addaudithook(_audit)
        _installed = True
        _sync_modules()


def installed() -> bool:
    return _installed


def refresh() -> None:
    """Patch lazily-loaded modules and rebind aliases, if any module was imported since last time.

    Called at every activation; when nothing was imported it costs one ``len(sys.modules)``.
    """
    if _installed and len(sys.modules) != _modules_seen:
        with _lock:
            _sync_modules()


def _sync_modules() -> None:
    global _modules_seen
    for module_name, patch in list(_LAZY_PATCHES.items()):
        if module_name in sys.modules:
            try:
                patch()
            except (AttributeError, KeyError):
                continue  # the module is still initializing on another thread; retry next time
            del _LAZY_PATCHES[module_name]
    _rebind_aliases()
    _modules_seen = len(sys.modules)


def _rebind_aliases() -> None:
    """Point every module-level name bound to an original at its patched function."""
    for module_name, module in list(sys.modules.items()):
        if module is None or module_name.startswith(OWN_MODULE_PREFIX):
            continue
        try:
            namespace = module.__dict__
        except Exception:
            continue
        if type(namespace) is not dict:
            continue
        for name, value in list(namespace.items()):
            entry = _replacements.get(id(value))
            if entry is not None and entry[0] is value:
                namespace[name] = entry[1]


def original(label: str) -> Any:
    """The real function behind a patched call label such as ``"time.time"`` (install first)."""
    return _originals[label]


def patched_labels() -> list[str]:
    """Every call the guard intercepts by patching (the audit-hook calls are in AUDIT_FORBIDDEN)."""
    return sorted(_originals)


def uncovered_labels() -> list[str]:
    """Calls this interpreter would not let the guard patch (documented leaks)."""
    return list(_uncovered)
