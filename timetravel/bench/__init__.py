"""``timetravel bench``: figures measured side by side, never timed tests.

Each suite returns ``{"bench": NAME, "figures": {...}}``. Wall-clock time is read here, outside
the simulation path, and every figure is the best of a few repeats so that a noisy neighbour on a
2-core machine does not decide the result.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

SUITES: dict[str, str] = {
    "kernel": "timetravel.bench.kernel:run_bench",
    "minimize": "timetravel.bench.minimize:run_bench",
    "fabric": "timetravel.bench.fabric:run_bench",
    "tui": "timetravel.tui.bench:run_bench",
    "snapshot": "timetravel.bench.snapshot:run_bench",
    "farm": "timetravel.bench.farm:run_bench",
    "explore": "timetravel.bench.explore:run_bench",
    "training": "timetravel.bench.training:run_bench",
    "torch": "timetravel.bench.torch:run_bench",
}


def suite_names() -> list[str]:
    return list(SUITES)


def get_suite(name: str) -> Callable[..., dict[str, Any]]:
    import importlib

    module_name, _, attribute = SUITES[name].partition(":")
    return getattr(importlib.import_module(module_name), attribute)
