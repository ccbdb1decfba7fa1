"""``timetravel.torch.metric(name, value)``: a training script reports a metric to the simulator.

Outside the simulator it does nothing, so a script may call it unconditionally and still run
under plain ``python`` or real ``torchrun``. Inside a rank, the runtime's
:func:`timetravel.torch.rank.env.metrics_capture.install_metrics` points it at the World's
metrics. This module imports nothing heavy (no torch): ``value`` may be any number or a
one-element tensor (anything ``float()`` accepts).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timetravel.torch.rank.errors import the_scripts

Sink = Callable[[str, float, int | None], None]
"""``sink(name, value, step)``: where a rank's metrics go; ``step`` is None when the script gave none."""

_sinks: list[Sink] = []


def metric(name: str, value: Any, step: int | None = None) -> None:
    """Record ``value`` under ``name`` (at ``step``) in the simulated run; a no-op outside the simulator."""
    if not _sinks:
        return
    if not isinstance(name, str) or not name:
        raise the_scripts(ValueError(f"a metric name is a non-empty string, not {name!r}"))
    if step is not None and (isinstance(step, bool) or not isinstance(step, int)):
        raise the_scripts(ValueError(f"a metric step is an integer or None, not {step!r}"))
    _sinks[-1](name, float(value), step)


def set_sink(sink: Sink) -> Callable[[], None]:
    """Send metrics to ``sink`` (the rank runtime does this); returns the function that takes it back."""
    _sinks.append(sink)

    def remove() -> None:
        if sink in _sinks:
            _sinks.remove(sink)

    return remove


def active() -> bool:
    """True inside a simulated rank (a sink is installed)."""
    return bool(_sinks)
