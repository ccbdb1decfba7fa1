"""Whether the kernel's compiled core is in use, and the switch that turns it off.

``timetravel/sim/_speedups.c`` holds the event loop and the Context's hot methods (``choose``,
``timer``, ``deliver``) in C, and the GPU stream engine's pump (fabric/gpu.py, which hands it the
Python functions it calls back). It is optional: ``make install`` builds it when the machine has a C
compiler, and without it the pure-Python code in kernel.py and context.py runs, giving the same
bits. ``TIMETRAVEL_PURE_PYTHON=1`` in the environment (read once, at import) forces the pure-Python
path, which is how the tests compare the two and how to rule the compiled core out of a bug hunt.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON_ENV = "TIMETRAVEL_PURE_PYTHON"
INTERFACE_VERSION = 4
"""What this Python code expects of the compiled module; a build that says otherwise is stale
(``make install`` rebuilds it) and is not used."""


def _load() -> ModuleType | None:
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        module = importlib.import_module("timetravel.sim._speedups")
    except ImportError:
        return None
    if getattr(module, "INTERFACE_VERSION", None) != INTERFACE_VERSION:
        return None
    return module


compiled: ModuleType | None = _load()
"""The compiled core, or None when the pure-Python kernel runs."""


def kernel_implementation() -> str:
    """``"compiled"`` or ``"python"``: which kernel this process runs (benchmarks report it)."""
    return "compiled" if compiled is not None else "python"
