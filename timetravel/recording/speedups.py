"""Recording's optional compiled code, or None when recording runs its pure-Python reference.

``timetravel/recording/_speedups.c`` holds the reader's check of a BLOBS frame's entries
(``blob_entries``; NotImplemented hands an unusual frame to catalog's Python check) and
``untrack`` / ``untrack_events``, which take the read-only plain data the reader and a Session's
shared states keep out of the cyclic garbage collector's reach (without them the data stays
tracked, as before). ``TIMETRAVEL_PURE_PYTHON=1`` switches it off.
"""

from __future__ import annotations

from types import ModuleType

from timetravel.sim import speedups

INTERFACE_VERSION = 1
"""What recording's Python code expects of its compiled module (a stale build is not used)."""

compiled: ModuleType | None = speedups.load_extension("timetravel.recording._speedups", INTERFACE_VERSION)
"""Recording's compiled module, or None (no compiler, a stale build, or switched off)."""
