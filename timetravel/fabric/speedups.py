"""Fabric's optional compiled code, or None when fabric runs its pure-Python reference.

``timetravel/fabric/_speedups.c`` holds the GPU stream engine of gpu.py (the pump, ``launch``,
``record``, ``wait``, the ``gpu.done`` handler, ``schedule_finishes``) and the tree all-reduce's
timing of collective.py in C, the same bits as the Python code beside it, which stays the
reference and the fallback. It works on the kernel's compiled objects (a context's fields, the
events it builds: sim/_speedups_api.h), so it is used only when the kernel's compiled core is too;
``TIMETRAVEL_PURE_PYTHON=1`` switches both off.
"""

from __future__ import annotations

from types import ModuleType

from timetravel.sim import speedups

INTERFACE_VERSION = 1
"""What fabric's Python code expects of its compiled module (a stale build is not used)."""

compiled: ModuleType | None = (
    speedups.load_extension("timetravel.fabric._speedups", INTERFACE_VERSION)
    if speedups.compiled is not None
    else None
)
"""Fabric's compiled module, or None (no compiler, a stale build, no compiled kernel, or switched off)."""
