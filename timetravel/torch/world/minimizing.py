"""What a minimizer keeps of a torch failure, and where its trials may stop (coordinator side).

``minimize`` shrinks a failing torch run — its faults, its choices, and its job: fewer ranks
(``nproc``) — and keeps a candidate only when it fails the same way. The same way means more than
the signature here: a repro that fails at another optimizer step, or on another tensor, is another
bug (a low-bit flip seen late by one detector and early by another). So:

* :func:`failure_identity` — the optimizer step and the tensor (a divergence's parameter name, a
  nan's collective op and tensor position) that a candidate's failure must share with the original;
* :func:`size_floor` — ``nproc`` never goes below what keeps every rank the failure involves (its
  node, a nan's ranks, a divergence's minority or sides, a hang's waiting and awaited ranks);
* :func:`past_failure` — a trial that has not failed by the time every rank completed the failure's
  step cannot reproduce it: the minimizer stops it there instead of running the job to its end.
"""

from __future__ import annotations

import math
from typing import Any

from timetravel.sim.world import World
from timetravel.torch.world.fault_causes import involved
from timetravel.torch.world.module_probe import rank_number
from timetravel.torch.world.specs import C10D_NODE

IDENTITY_KEYS = ("step", "tensor", "op")


def failure_identity(failure: dict[str, Any]) -> dict[str, Any]:
    """The optimizer step, tensor and collective op a failure names (those it has)."""
    return {key: failure[key] for key in IDENTITY_KEYS if key in failure}


def size_floor(name: str, failure: dict[str, Any], config: dict[str, Any]) -> int | None:
    """The fewest ranks per host that keep every rank ``failure`` involves (``nproc`` only)."""
    if name != "nproc":
        return None
    ranks, _collective = involved(failure)
    numbers = [number for number in (rank_number(rank) for rank in ranks) if number is not None]
    if not numbers:
        return None
    return math.ceil((max(numbers) + 1) / max(int(config.get("nnodes", 1)), 1))


def past_failure(world: World, failure: dict[str, Any]) -> bool:
    """Every rank completed the optimizer step the failure happened in, and the run has not failed."""
    step = failure.get("step")
    if world.failures or not isinstance(step, int) or C10D_NODE not in world.nodes:
        return False
    return int(world.nodes[C10D_NODE].get("steps_checked", 0)) >= step


__all__ = ["failure_identity", "past_failure", "size_floor"]
