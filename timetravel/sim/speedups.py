"""Whether the kernel's compiled core is in use, and the switch that turns every layer's C off.

``timetravel/sim/_speedups.c`` holds the kernel in C: the event loop, the Context's hot methods
(``choose``, ``timer``, ``deliver``) and the chain batch's packer. It is optional: ``make install``
builds it when the machine has a C compiler, and without it the pure-Python code in kernel.py and
context.py runs, giving the same bits. The layers above keep their own optional C beside their
Python reference (fabric/speedups.py, snapshot/speedups.py, recording/speedups.py), each loaded by
:func:`load_extension`. ``TIMETRAVEL_PURE_PYTHON=1`` in the environment (read once, at import)
forces the pure-Python path in every layer, which is how the tests compare the two and how to rule
the compiled code out of a bug hunt.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType

PURE_PYTHON_ENV = "TIMETRAVEL_PURE_PYTHON"
INTERFACE_VERSION = 5
"""What this Python code expects of the compiled module; a build that says otherwise is stale
(``make install`` rebuilds it) and is not used."""


def pure_python() -> bool:
    """Whether ``TIMETRAVEL_PURE_PYTHON`` switches every layer's compiled code off."""
    return os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0")


def load_extension(name: str, interface_version: int) -> ModuleType | None:
    """The compiled module ``name`` when it is built, current (its ``INTERFACE_VERSION`` is
    ``interface_version``) and not switched off; otherwise None, and its layer runs Python."""
    if pure_python():
        return None
    try:
        module = importlib.import_module(name)
    except ImportError:
        return None
    if getattr(module, "INTERFACE_VERSION", None) != interface_version:
        return None
    return module


compiled: ModuleType | None = load_extension("timetravel.sim._speedups", INTERFACE_VERSION)
"""The compiled core, or None when the pure-Python kernel runs."""


def kernel_implementation() -> str:
    """``"compiled"`` or ``"python"``: which kernel this process runs (benchmarks report it)."""
    return "compiled" if compiled is not None else "python"
