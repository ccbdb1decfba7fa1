"""Tensors' values a torch recording keeps only as digests (sim/elided.py), rebuilt on demand.

:class:`ElidedValues` is the part of a Session that reads them: ``with_values`` makes the worlds
carry their values (a world source that can rebuild them: ``WorldSource.with_values``), and
``read_values`` / :func:`reads_values` run a read again within it when it met an elided value.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from timetravel.explore.world_source import WorldSource
from timetravel.sim.elided import ElidedError
from timetravel.sim.world import World

T = TypeVar("T")


def reads_values(action: Callable[..., T]) -> Callable[..., T]:
    """An action over a Session (its first argument) that may read tensors' values: run within
    ``Session.read_values`` (again with the values rebuilt, if it met an elided one)."""

    @functools.wraps(action)
    def run(session: ElidedValues, *args: Any, **kwargs: Any) -> T:
        return session.read_values(lambda: action(session, *args, **kwargs))

    return run


class ElidedValues:
    """A Session's reads of elided tensors' values (over its ``source`` and cursor ``world``)."""

    source: WorldSource
    world: World

    @contextlib.contextmanager
    def with_values(self) -> Iterator[None]:
        """Within: the worlds this Session and its actions hold carry their tensors' values — the
        cursor's world rebuilt now, re-executions run the recorded processes (a source that can:
        ``WorldSource.with_values``; every world is plain data otherwise, and nothing changes)."""
        values = getattr(self.source, "with_values", None)
        if values is None:
            yield
            return
        with values():
            self.source.materialize(self.world)  # type: ignore[attr-defined]
            yield

    def read_values(self, read: Callable[[], T]) -> T:
        """``read()``, again within :meth:`with_values` if it met a tensor whose values are rebuilt
        by re-execution (ElidedError); that error again when they cannot be (the script not named, or
        the source's ``values_not_rebuilt`` says why: a state too large to hold)."""
        try:
            return read()
        except ElidedError:
            if getattr(self.source, "with_values", None) is None:
                raise
        with self.with_values():
            try:
                return read()
            except ElidedError as error:
                why: list[str] = getattr(self.source, "values_not_rebuilt", list)()
                if not why:
                    raise
                raise ElidedError(f"{error}: {why[0]}") from None


__all__ = ["ElidedValues", "reads_values"]
