"""Structured failures: what went wrong, where and when, and a signature to bucket it by.

The signature is ``kind:site``. The site names the *place in the code* (a detector, a handler,
an oracle), never a rank, a time or a seed, so the same bug found on rank 3 of seed 17 and on
rank 0 of seed 902 lands in one bucket, and a minimizer that shrinks the cluster keeps it.
"""

from __future__ import annotations

import re
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
