"""The guard's wrappers: what a patched function does in place of the original.

Each wrapper reads this thread's guard slot (:data:`~timetravel.sim.guard.state.ACTIVE`): off, it
calls the original; on, it simulates the call (virtualize mode) or raises DeterminismError naming
the call site (forbid mode, and always for :func:`forbidden` calls). A :data:`Maker` builds one for
a call label and its original, so :mod:`timetravel.sim.guard.patches` can say per function which
kind it gets. :func:`set_type_attribute` patches even an immutable C type (datetime's).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

from timetravel.sim.guard.state import ACTIVE, violation


def describe(patched: Callable[..., Any], original: Any, module: str, qualname: str) -> None:
    """Make the wrapper look like the original (name, doc, pickling by reference)."""
    patched.__name__ = qualname.rsplit(".", 1)[-1]
    patched.__qualname__ = qualname
    patched.__module__ = module
    patched.__doc__ = getattr(original, "__doc__", None)
    patched.__wrapped__ = original  # type: ignore[attr-defined]


def virtualized(label: str, original: Any, simulate: Callable[..., Any], advice: str) -> Callable[..., Any]:
    """Real when the guard is off; ``simulate(context, *args)`` in virtualize mode; refused in forbid."""

    def patched(*args: Any, **kwargs: Any) -> Any:
        context = ACTIVE.context
        if context is None:
            return original(*args, **kwargs)
        if ACTIVE.forbid:
            raise violation(label, advice)
        return simulate(context, *args, **kwargs)

    return patched


def virtualized_clock(
    label: str, original: Any, simulate: Callable[[Any], Any], advice: str
) -> Callable[[], Any]:
    """:func:`virtualized` for a clock that takes no arguments (the cheapest pass-through)."""

    def patched() -> Any:
        context = ACTIVE.context
        if context is None:
            return original()
        if ACTIVE.forbid:
            raise violation(label, advice)
        return simulate(context)

    return patched


def virtualized_when_omitted(
    label: str, original: Any, position: int, simulate: Callable[..., Any], advice: str
) -> Callable[..., Any]:
    """Like :func:`virtualized`, but a call that passes its time argument is pure and passes through."""

    def patched(*args: Any, **kwargs: Any) -> Any:
        context = ACTIVE.context
        if context is None or (len(args) > position and args[position] is not None) or kwargs:
            return original(*args, **kwargs)
        if ACTIVE.forbid:
            raise violation(label, advice)
        return simulate(context, *args)

    return patched


def forbidden(label: str, original: Any, advice: str) -> Callable[..., Any]:
    """Real when the guard is off; DeterminismError in every mode when it is on."""

    def patched(*args: Any, **kwargs: Any) -> Any:
        if ACTIVE.context is None:
            return original(*args, **kwargs)
        raise violation(label, advice)

    return patched


Maker = Callable[[str, Any], Callable[..., Any]]
"""``make(label, original) -> patched``: how a patch wraps one original."""


def as_virtualized(simulate: Callable[..., Any], advice: str) -> Maker:
    def make(label: str, original: Any) -> Callable[..., Any]:
        return virtualized(label, original, simulate, advice)

    return make


def as_virtualized_clock(simulate: Callable[[Any], Any], advice: str) -> Maker:
    def make(label: str, original: Any) -> Callable[..., Any]:
        return virtualized_clock(label, original, simulate, advice)

    return make


def as_virtualized_when_omitted(position: int, simulate: Callable[..., Any], advice: str) -> Maker:
    def make(label: str, original: Any) -> Callable[..., Any]:
        return virtualized_when_omitted(label, original, position, simulate, advice)

    return make


def as_forbidden(advice: str) -> Maker:
    def make(label: str, original: Any) -> Callable[..., Any]:
        return forbidden(label, original, advice)

    return make


def set_type_attribute(cls: type, name: str, value: Any) -> bool:
    """Set an attribute on a type, even an immutable C type (CPython); False when impossible."""
    try:
        setattr(cls, name, value)
        return True
    except TypeError:
        pass
    if sys.implementation.name != "cpython":
        return False
    import ctypes
    import gc

    referents = gc.get_referents(cls.__dict__)
    if len(referents) != 1 or type(referents[0]) is not dict:
        return False
    referents[0][name] = value
    ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))
    return getattr(cls, name, None) is not None
