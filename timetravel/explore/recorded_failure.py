"""A recorded branch's failure with every field its detector recorded, not only the END frame's five.

A recording's END and FAILURE frames keep the fields every failure has (kind, node, t_ns, message,
signature: what the catalog indexes and a replay checks). What the detector recorded besides — a
hang's ``waiting_for`` and ``flight_recorder``, a divergence's ``minority``/``split``/``tensor``, a
silent corruption's faults and step — is in the world the run ended in: the failure record in
``world.failures`` of the branch's final snapshot. Reading it restores that snapshot (no execution),
and the record is used only when it is the one the END frame names.
"""

from __future__ import annotations

from typing import Any

from timetravel.explore.session import Session
from timetravel.sim.failure import PUBLIC_FIELDS, failure_fields


def recorded_failure(session: Session, stored: dict[str, Any] | None) -> dict[str, Any] | None:
    """``stored`` (a branch's END-frame failure) with the rest of its fields from ``session``'s final
    snapshot, when it has one holding the same failure; else ``stored`` as it is."""
    if stored is None:
        return None
    snapshots = session.snapshots()
    if not snapshots or not snapshots[-1].final:
        return dict(stored)
    failures = session.snapshot_world(len(snapshots) - 1).failures
    if not failures or any(failures[0].get(key) != stored.get(key) for key in ("kind", "t_ns", "signature")):
        return dict(stored)
    full = failure_fields(failures[0]) or {}
    return {**full, **{key: stored[key] for key in PUBLIC_FIELDS if key in stored}}
