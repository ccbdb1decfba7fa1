"""The few places where the fabric calls back into a scenario: crash, restart, buffers, fault notices.

Hooks are code, so they live in the scenario module next to its handlers and are handed to
``with_handlers`` (which binds them into the fault handler) and to ``install`` (which only asks
whether the scenario can restart a node, to decide if swarm testing may crash one). None of them
is required: without ``on_restart`` a crash is permanent, without ``find_buffer`` a buffer named
by a corrupt fault is ``state["buffers"][name]``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from timetravel.sim.context import Context

BUFFERS_KEY = "buffers"
"""Key in a node's state of the dict ``{name: numpy array}`` that corrupt faults may name."""

NodeHook = Callable[[dict[str, Any], "Context", dict[str, Any]], None]
"""``hook(state, ctx, fault_record)``: runs as the target node, inside the fault's event."""


@dataclass(frozen=True)
class Hooks:
    """Scenario callbacks the fabric calls (see the module docstring)."""

    on_crash: NodeHook | None = None
    """After the node went down (``world.down``) and lost its GPU work; e.g. forget volatile state."""
    on_restart: NodeHook | None = None
    """At the crash's ``t_end``, after the node came back up; restore from a checkpoint, re-arm timers."""
    find_buffer: Callable[[dict[str, Any], str], np.ndarray | None] | None = None
    """``find_buffer(state, name)``: the writable array a corrupt fault flips a bit of (None: not there)."""
    on_fault: Callable[[dict[str, Any], Context, dict[str, Any], str], None] | None = None
    """``on_fault(state, ctx, record, phase)``, after the fabric applied a fault's ``start`` or ``end``."""

    @property
    def restartable(self) -> bool:
        return self.on_restart is not None
