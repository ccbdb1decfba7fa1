"""The all-reduce at the collective level: one completion event per rank, numerics computed once.

With ``fabric_level=collective`` (or ``auto`` from ``COLLECTIVE_LEVEL_RANKS_MIN`` ranks on) a rank
that reaches the all-reduce *enters* it (:func:`start`: no message, no event); when the last rank
has entered, that rank's handler resolves the collective: the fabric times it from the topology
and the link tables (:mod:`timetravel.fabric.collective`), the active faults are folded in, the
sum is computed once over every rank's contribution in the algorithm's own order, and each rank
gets one ``coll_done`` event at the time the message pattern would have completed on it
(:func:`on_done`), which completes its collective exactly as the message level does.

**Same bits.** The ring sums chunk c in the order c, c+1, ..., which is ``ring.canonical_sum``; the
tree and the parameter server in canonical order are ``tree.canonical_sum`` and
``naive.canonical_sum``; in arrival order the tree adds each node's children in the order their
sums arrive in the timing model (``tree.arrival_sum``) and the server adds the ranks in the order
their buckets arrive. The message level computes the same additions for the same order
(tests/test_dp_training_collective.py compares the two levels).

**Faults.** A rank that crashed does not enter (and a crash breaks the open collective:
:func:`timetravel.fabric.collective.abandon`), so the collective waits until the elastic restart
stops it, as at the message level. A partition between members stalls it until it heals, or hangs
it; a drop costs ``retransmit_timeout`` (the receiver's watchdog would ask again); an in-flight
corruption is caught by the checksum (``checksums=on``: the same cost as a drop) or flips a bit of
the target's contribution before the sum (``checksums=off``: every rank sees it alike, as a
reduce-scatter chunk does). A ``grad`` buffer flip lands in the contribution while the collective
waits for its last member, as it lands in chunks not yet sent at the message level.

The modelled job may move more bytes than the toy bucket holds (``collective_bytes``, in
``bucket_bytes`` buckets): only the timing uses them.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np

from timetravel.fabric import collective as fabric_collective
from timetravel.fabric import collective_timing
from timetravel.fabric.gpu import schedule_finishes
from timetravel.fabric.network import flip_bit
from timetravel.scenarios.dp_training import collective, device, naive, ring, tree
from timetravel.scenarios.dp_training.numerics import sequential_sum, stack_rows
from timetravel.sim import Context, Event, World

DONE = "coll_done"
KINDS = {
    "ring": (ring.KIND, ring.RETRANSMITTED),
    "tree": (tree.UP, tree.DOWN),
    "naive": (naive.UP, naive.DOWN),
}
"""The message kinds each algorithm sends at the message level (what a fault's ``kinds`` names)."""
WAITS_SHOWN = 8


def key_of(state: dict[str, Any]) -> str:
    return f"{state['generation']}:{state['coll_seq']}"


def start(state: dict[str, Any], ctx: Context) -> bool:
    """Enter the collective; resolve it when this rank is the last. True for the first to enter
    (its watchdog watches the collective for a hang)."""
    key = key_of(state)
    record = fabric_collective.enter(
        ctx, key, state["generation"], state["coll_step"], state["ranks"], state["index"]
    )
    if record["step"] != state["coll_step"]:
        ctx.fail(
            "collective_mismatch",
            f"{ctx.node} entered collective #{state['coll_seq']} as the all-reduce of step "
            f"{state['coll_step']}, which its peers entered for step {record['step']}",
            site=collective.MISMATCH_SITE,
        )
        return False
    if record["entered"] == record["members"]:
        _resolve(ctx, key, record)
    return record["entered"] == 1


def _modelled_bytes(config: dict[str, Any], contribution: np.ndarray) -> int:
    return config["collective_bytes"] or contribution.nbytes


def _resolve(ctx: Context, key: str, record: dict[str, Any]) -> None:
    """Every member has entered: time the collective, fold in the faults, sum once, schedule completions."""
    world = ctx.world
    config = world.config
    fabric = world.fabric
    names = fabric["ranks"]
    nodes = world.nodes
    contributions = stack_rows([nodes[name]["contribution"] for name in names])
    entries = np.array(record["entered_ns"], dtype=np.int64)
    algorithm = config["allreduce"]
    ranks = len(names)
    total_bytes = _modelled_bytes(config, contributions[0])
    if algorithm == "ring":
        buckets = max(1, -(-total_bytes // config["bucket_bytes"])) if config["bucket_bytes"] else 1
        chunk_bytes = max(1, total_bytes // (buckets * ranks))
        times = collective_timing.ring_completions(fabric, entries, chunk_bytes, buckets)
        messages = 2 * (ranks - 1) * buckets
    elif algorithm == "tree":
        element_bytes = contributions.itemsize
        bounds = tree.chunk_bounds(contributions.shape[1], element_bytes, config["tree_chunk_bytes"])
        scale = total_bytes / contributions[0].nbytes
        sizes = [
            max(1, round((high - low) * element_bytes * scale)) for low, high in itertools.pairwise(bounds)
        ]
        times, right_first = collective_timing.tree_completions(fabric, entries, sizes)
        messages = 3 * len(sizes)
    else:
        times, heard = collective_timing.star_completions(fabric, entries, total_bytes)
        messages = 1
    window = (int(entries.min()), int(times.max()))
    effects = fabric_collective.fault_effects(
        ctx, KINDS[algorithm], messages, config["retransmit_timeout"], window
    )
    if effects.hung is not None:
        record["hung"] = [effects.hung, effects.blocked_on]
        return
    delay_ns = effects.delay_ns
    for index, rule in effects.corrupt:
        if config["checksums"]:
            delay_ns += config["retransmit_timeout"]
        else:
            flip_bit(ctx, contributions[index], rule.get("element"), rule.get("bit"), rule["id"])
    if algorithm == "ring":
        total = ring.canonical_sum(contributions)
    elif algorithm == "tree":
        total = _tree_sum(contributions, bounds, right_first, config["reduce_order"])
    elif config["reduce_order"] == "arrival":
        total = sequential_sum(contributions[[0, *heard]])
    else:
        total = naive.canonical_sum(contributions)
    total.flags.writeable = False
    record["result"] = total
    _deliver(ctx, key, names, times + delay_ns)


def _deliver(ctx: Context, key: str, names: list[str], times: np.ndarray) -> None:
    """Each member's completion is the end of its open all-reduce kernel (one event per rank);
    a member whose kernel is not running (it cannot be, short of a bug) hears ``coll_done``."""
    at_ns = np.maximum(times, ctx.now).tolist()
    schedule_finishes(ctx, names, device.COMM, device.ALLREDUCE_KERNEL, at_ns, DONE, key)


def finish(state: dict[str, Any], ctx: Context) -> bool:
    """The all-reduce kernel ended at this rank's completion time: complete the collective from the
    fabric's record (False when it broke: a member crashed).

    Only ``pipeline.on_allreduce_done`` calls it, and it turns ``state["result"]`` into the
    rank's own average and clears it in the same handler: so the result is handed over as the
    record holds it (read-only, shared by the members), not copied (a copy per rank and step that
    no snapshot, hash or other handler could ever see)."""
    if not state["coll_active"]:
        return False
    result = fabric_collective.take_result(ctx.world, key_of(state))
    if result is None:
        return False
    state["coll_heard_ns"] = ctx.now
    collective.complete(state, ctx, result, finish_kernel=False)
    return True


def _tree_sum(
    contributions: np.ndarray, bounds: tuple[int, ...], right_first: list[list[bool]], order: str
) -> np.ndarray:
    if order != "arrival":
        return tree.canonical_sum(contributions)
    parts = [
        tree.arrival_sum(contributions[:, low:high], flipped)
        for (low, high), flipped in zip(itertools.pairwise(bounds), right_first, strict=True)
    ]
    return np.concatenate(parts)


def on_done(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """This rank's part of the collective is done: take the result, complete as the message level does."""
    key = event[4]
    if not state["coll_active"] or key != key_of(state):
        return
    result = fabric_collective.take_result(ctx.world, key)
    if result is None:
        return
    state["coll_heard_ns"] = ctx.now
    collective.complete(state, ctx, result.copy())


def waits_on(world: World) -> dict[str, list[str]]:
    """Per open collective key, whom its members wait on: the ranks that have not entered (the first
    few), or the target of the partition that hangs it."""
    names = world.fabric["ranks"]
    waits = {}
    for key, record in fabric_collective.open_collectives(world).items():
        if record["hung"] is not None:
            target = record["hung"][1]
            waits[key] = [target] if target in world.fabric["rank_of"] else []
            continue
        missing = [names[index] for index, t_ns in enumerate(record["entered_ns"]) if t_ns < 0]
        waits[key] = missing[:WAITS_SHOWN]
    return waits


def entered(world: World, state: dict[str, Any]) -> bool:
    record = fabric_collective.open_collectives(world).get(key_of(state))
    return record is not None and record["entered_ns"][state["index"]] >= 0


HANDLERS = {DONE: on_done}
