"""``duplicate_batches``: data that the job trains on twice, read off the recorded sampler indices.

Two bugs that real torch runs without a word, and that every rank's ``nodes/rN/batch`` (the sampler
indices of the DataLoader batches of its current optimizer step: world/state.py) shows plainly:

* **two ranks receive the same indices in the same optimizer step** — a DDP script whose DataLoader has
  no ``DistributedSampler`` gives every rank the same batches: N ranks do the work of one, and the
  averaged gradient is one rank's;
* **a sampler whose order repeats every epoch** — a ``DistributedSampler(shuffle=True)`` whose
  ``set_epoch`` is never called draws the same permutation each epoch: a rank's batch equals the first
  batch it ever received, and the next one its second (one repeated batch alone may be a batch read for
  its size and never trained on). A first batch whose indices are in increasing order is a sequential sampler
  (``shuffle=False``), whose order repeats by design: not reported.

Checked on the rank node as each batch arrives, against the peers' current batches (reading another
node's state; only the node's own is written) and the digest of the rank's own first batch (kept in its
node as ``batch_first``). The first finding goes to ``c10d`` as the warning ``duplicate_batches`` (the
run's summary names the ranks and the step); ``--set detect_duplicate_batches=fail`` makes it a
failure of that kind, ``off`` skips the check. Ranks that must see the same batch by design (the
tensor- or pipeline-parallel peers of a 2-D job) are reported too: turn the check off there.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import xxhash

from timetravel.sim.context import Context

WARNING = "duplicate_batches"
C10D_NODE = "c10d"


def check(state: dict[str, Any], indices: list[int], ctx: Context) -> None:
    """On rank node ``ctx.node``, a DataLoader batch with ``indices`` just reached ``state['batch']``."""
    if ctx.world.config["detect_duplicate_batches"] == "off" or not indices:
        return
    first = state.get("batch_first")  # None: this is the rank's first batch
    digest = xxhash.xxh3_64_hexdigest(np.asarray(indices, dtype=np.int64).tobytes())
    if first is None:
        increasing = all(earlier < later for earlier, later in itertools.pairwise(indices))
        state["batch_first"] = {"step": state["batch"]["step"], "digest": digest, "sequential": increasing}
    elif "second" not in first:
        first["second"] = digest
    if WARNING in ctx.world.nodes[C10D_NODE].get("warnings", {}):
        return  # reported already: once per run
    found = _same_step_peer(state, ctx) or _epoch_repeat(ctx.node, state, first, digest)
    if found is None:
        return
    detail, ranks, step = found
    warning = {
        "kind": "warning",
        "name": WARNING,
        "rank": int(ctx.node[1:]),
        "incarnation": state["incarnation"],
        "detail": detail,
        "ranks": ranks,
        "step": step,
    }
    ctx.deliver(ctx.now, C10D_NODE, "warning", warning)


def _same_step_peer(state: dict[str, Any], ctx: Context) -> tuple[str, list[str], int] | None:
    batch = state["batch"]
    for rank in range(ctx.world.nodes[C10D_NODE]["ranks"]):
        name = f"r{rank}"
        peer = ctx.world.nodes.get(name)
        if name == ctx.node or peer is None or peer.get("incarnation") != state["incarnation"]:
            continue
        other = peer.get("batch")
        if (
            isinstance(other, dict)
            and other["step"] == batch["step"]
            and other["indices"] == batch["indices"]
        ):
            count = len(batch["indices"])
            detail = (
                f"{name} and {ctx.node} received the same {count} sampler indices in optimizer step "
                f"{batch['step']} (a DataLoader without a DistributedSampler gives every rank the same batches)"
            )
            return detail, sorted([name, ctx.node], key=lambda text: int(text[1:])), batch["step"]
    return None


def _epoch_repeat(
    node: str, state: dict[str, Any], first: dict[str, Any] | None, digest: str
) -> tuple[str, list[str], int] | None:
    """The rank's first two batches drawn again, one after the other, in a later step: its sampler's
    order repeats. One repeated batch alone is not enough: a script that reads ``next(iter(loader))``
    for the batch size before ``set_epoch`` (pytorch/examples' DDP tutorial) draws the previous order's
    first batch and never trains on it; the batch after it is the new order's."""
    if first is None or first["sequential"] or "second" not in first:
        return None
    pending = first.pop("repeat_step", None)  # the previous batch repeated the first one
    if digest == first["digest"] and state["batch"]["step"] > first["step"]:
        first["repeat_step"] = state["batch"]["step"]
        return None
    if pending is None or digest != first["second"]:
        return None
    detail = (
        f"{node}'s batch in optimizer step {pending} repeats its first batch (step "
        f"{first['step']}): its sampler's order repeats every epoch (DistributedSampler.set_epoch never called?)"
    )
    return detail, [node], pending
