"""Snapshot's optional compiled code, or None when snapshot runs its pure-Python reference.

``timetravel/snapshot/_speedups.c`` holds the decoders of stored values of codec.py
(``decode_plain``, ``decode_plain_against``, ``copy_plain``: msgpack's value for the common case,
NotImplemented for msgpack to decode the rest) and the loop of changes.py's ``Changes.add``, in C.
``TIMETRAVEL_PURE_PYTHON=1`` switches it off.
"""

from __future__ import annotations

from types import ModuleType

from timetravel.sim import speedups

INTERFACE_VERSION = 1
"""What snapshot's Python code expects of its compiled module (a stale build is not used)."""

compiled: ModuleType | None = speedups.load_extension("timetravel.snapshot._speedups", INTERFACE_VERSION)
"""Snapshot's compiled module, or None (no compiler, a stale build, or switched off)."""
