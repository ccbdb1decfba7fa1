"""Structured failures: what went wrong, where and when, and a signature to bucket it by.

The signature is ``kind:site``. The site names the *place in the code* (a detector, a handler,
an oracle), never a rank, a time or a seed, so the same bug found on rank 3 of seed 17 and on
rank 0 of seed 902 lands in one bucket, and a minimizer that shrinks the cluster keeps it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

FAILURE_KINDS: dict[str, str] = {
    # the kernel's own
    "exception": "a handler (or the scenario's code outside one) raised",
    "unhandled": "an event reached a node with no handler for its kind",
    # detectors and oracles of the built-in worlds (fabric/, scenarios/)
    "nan": "a NaN or Inf reached data that must stay finite",
    "divergence": "replicas that must agree hold different values",
    "hang": "a node waited past its timeout, or still waited when the run ended",
    "race": "a buffer touched by two GPU streams with no ordering edge",
    "oracle": "an end-of-run oracle found a result other than the expected one",
    "assertion": "a scenario's own invariant did not hold",
    "collective_mismatch": "ranks called different collectives (op, shapes or dtypes) at one point",
    "blowup": "a training loss or weight grew without bound",
    "crash": "a process died (a fault, a signal, a non-zero exit)",
    "timeout": "a seed ran past its wall-clock budget (the farm's)",
    # the user's torch code (torch/)
    "stuck": "a rank ran past the wall-clock watchdog without calling the World",
    "unsupported": "the script used something the simulator refuses (named in the message)",
    "oom": "a rank allocated more memory than its limit (the torch setting rank_memory_max)",
    "resume_mismatch": "a restart after a crash did not resume where the run would have gone on",
    "silent_corruption": "a fault changed the run's final parameters and no detector noticed",
    "duplicate_batches": "ranks trained on the same samples in one step, or every epoch in one order",
    "internal": "timetravel's own code raised inside a rank (a bug of the simulator, not of the script)",
}
"""Every kind of failure, with what it means: the one table (``make_failure`` refuses any other kind,
so a detector that invents one fails its tests; docs/architecture.md lists them)."""
_DIGITS = re.compile(r"\d+")


def normalize_site(site: str) -> str:
    """Replace every run of digits by ``N`` so that no rank number leaks into a signature."""
    return _DIGITS.sub("N", site)


def make_failure(kind: str, node: str | None, t_ns: int, message: str, site: str) -> dict[str, Any]:
    """A failure record (plain data, so it lives in the world and in recordings)."""
    if kind not in FAILURE_KINDS:
        raise ValueError(f"unknown failure kind {kind!r} (sim/failure.py FAILURE_KINDS lists them)")
    site = normalize_site(site)
    return {
        "kind": kind,
        "node": node,
        "t_ns": t_ns,
        "message": message,
        "site": site,
        "signature": f"{kind}:{site}",
    }


PUBLIC_FIELDS = ("kind", "node", "t_ns", "message", "signature")
"""The fields every failure has, first in :func:`failure_fields` (and all a recording's END frame keeps)."""


def failure_fields(failure: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Every field of a failure record as JSON data, the common ones first: what a detector recorded
    (a hang's ``waiting_for`` and ``flight_recorder``, a divergence's ``minority``/``split``/``tensor``,
    ...) is what ``--json`` prints. Numpy values become numbers or lists, bytes their hex."""
    if failure is None:
        return None
    ordered = [key for key in PUBLIC_FIELDS if key in failure]
    ordered += [key for key in failure if key not in PUBLIC_FIELDS]
    return {str(key): _json_value(failure[key]) for key in ordered}


def _json_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(key): _json_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(item) for item in value]
    if isinstance(value, bytes):
        return value.hex()
    if hasattr(value, "tolist"):  # a numpy array or scalar
        return _json_value(value.tolist())
    return value
