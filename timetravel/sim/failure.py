"""Structured failures: what went wrong, where and when, and a signature to bucket it by.

The signature is ``kind:site``. The site names the *place in the code* (a detector, a handler,
an oracle), never a rank, a time or a seed, so the same bug found on rank 3 of seed 17 and on
rank 0 of seed 902 lands in one bucket, and a minimizer that shrinks the cluster keeps it.
"""

from __future__ import annotations

import re
from typing import Any

FAILURE_KINDS = (
    "nan",
    "divergence",
    "hang",
    "race",
    "oracle",
    "assertion",
    "exception",
    "unhandled",
    "collective_mismatch",
    "blowup",
    "crash",
    "timeout",
)
_DIGITS = re.compile(r"\d+")


def normalize_site(site: str) -> str:
    """Replace every run of digits by ``N`` so that no rank number leaks into a signature."""
    return _DIGITS.sub("N", site)


def make_failure(kind: str, node: str | None, t_ns: int, message: str, site: str) -> dict[str, Any]:
    """A failure record (plain data, so it lives in the world and in recordings)."""
    if not kind or not isinstance(kind, str):
        raise ValueError("a failure needs a kind")
    site = normalize_site(site)
    return {
        "kind": kind,
        "node": node,
        "t_ns": t_ns,
        "message": message,
        "site": site,
        "signature": f"{kind}:{site}",
    }
