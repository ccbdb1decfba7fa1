"""The shell's own results (its commands beyond the shared language): the plot of metric curves."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from timetravel.shell.render.plot import Series


@dataclass(frozen=True)
class PlotResult:
    """Curves of one metric, one per branch, to draw as a terminal plot."""

    metric: str
    series: tuple[Series, ...]
    log_y: bool = False
    width: int = 60
    height: int = 12

    def to_data(self) -> dict[str, Any]:
        """JSON-safe: a non-finite value is the string ``nan``, ``inf`` or ``-inf`` (JSON has none)."""
        return {
            "metric": self.metric,
            "log_y": self.log_y,
            "series": [
                {
                    "label": curve.label,
                    "points": [[t_ns, _json_number(value)] for t_ns, value in curve.points],
                }
                for curve in self.series
            ],
        }


def _json_number(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)
