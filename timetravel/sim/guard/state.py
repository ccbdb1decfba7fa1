"""Which handler context the guard serves on *this* thread, and the error it raises.

The patched functions are installed once per process and stay installed; whether a call is
virtualized, refused or passed straight through is decided by one thread-local read. The kernel
points this thread's slot at its Context for the duration of a run segment (only handlers run on
that thread during a segment) and restores the previous value afterwards, so every other thread —
Textual's UI, a Dask worker's own code, a progress bar — keeps seeing the real functions.
"""

from __future__ import annotations

import os
import sys
import sysconfig
import threading
from types import FrameType
from typing import Any

MODE_VIRTUALIZE = "virtualize"
MODE_FORBID = "forbid"
MODE_OFF = "off"
MODES = (MODE_VIRTUALIZE, MODE_FORBID, MODE_OFF)
MODE_DEFAULT = MODE_VIRTUALIZE
CALL_SITE_FRAMES_MAX = 200
"""How far up the stack the call-site search looks for the user's frame."""

_GUARD_DIRECTORY = os.path.dirname(os.path.abspath(__file__))
_STDLIB_DIRECTORIES = tuple(
    sorted({os.path.abspath(sysconfig.get_paths()[name]) for name in ("stdlib", "platstdlib")})
)
_THIRD_PARTY_MARKERS = ("site-packages", "dist-packages")


class DeterminismError(RuntimeError):
    """A handler called something the simulation cannot make deterministic.

    The message names the call (``time.sleep``), the call site in the user's code
    (``file:line in function``), the node and event being handled, and what to do instead.
    The same facts are attributes, for tools.
    """

    def __init__(
        self,
        call: str,
        advice: str,
        *,
        filename: str,
        lineno: int,
        function: str,
        node: str,
        event_kind: str,
        t_ns: int,
    ) -> None:
        self.call = call
        self.filename = filename
        self.lineno = lineno
        self.function = function
        self.node = node
        self.event_kind = event_kind
        self.t_ns = t_ns
        handled = f"node {node} handled {event_kind!r}" if node else "the end-of-run hook ran"
        super().__init__(
            f"{call} called at {filename}:{lineno} in {function} while {handled} at t={t_ns} ns: {advice}"
        )


class ModeError(ValueError):
    """A determinism mode that does not exist (bad input: the message lists the modes)."""


def check_mode(mode: str) -> str:
    """``mode`` if it is one of MODES, else a ModeError naming the choices."""
    if mode not in MODES:
        raise ModeError(f"unknown determinism mode {mode!r} (choose from {', '.join(MODES)})")
    return mode


class _Active(threading.local):
    """Per-thread guard slot; class attributes are every thread's defaults (guard off)."""

    context: Any = None
    """The kernel's Context while a segment runs on this thread, else None."""
    forbid: bool = False
    """True in forbid mode: virtualizable calls raise too."""
    random_instance: Any = None
    numpy_state: Any = None


ACTIVE = _Active()


def activate(context: Any, mode: str) -> tuple[Any, bool]:
    """Serve ``context`` on this thread; returns the previous slot for :func:`deactivate`."""
    previous = (ACTIVE.context, ACTIVE.forbid)
    ACTIVE.context = context
    ACTIVE.forbid = mode == MODE_FORBID
    return previous


def deactivate(previous: tuple[Any, bool]) -> None:
    """Restore the slot :func:`activate` returned (so nested runs unwind correctly)."""
    ACTIVE.context, ACTIVE.forbid = previous


def active_context() -> Any:
    """The Context the guard serves on this thread, or None when the real functions are live."""
    return ACTIVE.context


class suspended:
    """``with suspended():`` the real functions on this thread, e.g. around an observer callback."""

    __slots__ = ("_previous",)

    def __enter__(self) -> None:
        self._previous = activate(None, MODE_OFF)

    def __exit__(self, *exc_info: object) -> None:
        deactivate(self._previous)


def is_guard_file(filename: str) -> bool:
    """True for the guard's own source files (never the place a user needs to look at)."""
    return os.path.abspath(filename).startswith(_GUARD_DIRECTORY)


def _is_library_file(filename: str) -> bool:
    if filename.startswith("<frozen "):
        return True  # frozen stdlib modules (<frozen os>); <string> and <stdin> are the user's
    path = os.path.abspath(filename)
    if path.startswith(_GUARD_DIRECTORY):
        return True
    if any(marker in path for marker in _THIRD_PARTY_MARKERS):
        return False
    return path.startswith(_STDLIB_DIRECTORIES)


def call_site() -> tuple[str, int, str]:
    """``(filename, line, function)`` of the innermost frame outside the stdlib and the guard.

    That is the user's line even when the forbidden call happened deep inside the stdlib
    (``subprocess.run`` -> ``Popen``), and a third-party library's line when one made the call.
    """
    frame: FrameType | None = sys._getframe(1)
    while (
        frame is not None
        and frame.f_back is not None
        and frame.f_code.co_filename.startswith(_GUARD_DIRECTORY)
    ):
        frame = frame.f_back
    innermost = frame if frame is not None else sys._getframe(0)
    for _ in range(CALL_SITE_FRAMES_MAX):
        if frame is None:
            break
        code = frame.f_code
        if not _is_library_file(code.co_filename):
            return code.co_filename, frame.f_lineno, code.co_name
        frame = frame.f_back
    return innermost.f_code.co_filename, innermost.f_lineno, innermost.f_code.co_name


def violation(call: str, advice: str) -> DeterminismError:
    """The error for ``call`` at the current call site, with the handled event's facts."""
    context = ACTIVE.context
    filename, lineno, function = call_site()
    node = getattr(context, "node", "") or ""
    event = getattr(context, "event", None)
    return DeterminismError(
        call,
        advice,
        filename=filename,
        lineno=lineno,
        function=function,
        node=node,
        event_kind=event[3] if event is not None else "end",
        t_ns=getattr(context, "now", 0),
    )
