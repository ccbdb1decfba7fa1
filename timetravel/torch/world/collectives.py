"""What every collective computes, with torch's semantics, over numpy arrays in the World.

An *entry* is one rank's call: ``{"rank", "index" (its rank in the group), "op", "inputs": [array...],
"opts": {...}}``. :func:`check_agreement` tells whether the ranks' calls agree as a real backend would
demand (same op, dtypes and shapes, same root and reduce op); :func:`outputs` computes, from the entries
in the order the World chose, what each rank receives. Rank-side code flattens torch's many signatures
(lists, single tensors, split sizes) into these few shapes, so the maths lives here once.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from timetravel.torch.world.reduce_ops import fold

COLLECTIVE_OPS = (
    "all_reduce",
    "broadcast",
    "all_gather",
    "reduce_scatter",
    "reduce",
    "gather",
    "scatter",
    "all_to_all",
    "barrier",
)
"""Group collectives. ``send``/``recv`` are point to point and matched in the scenario."""
REDUCING_OPS = ("all_reduce", "reduce_scatter", "reduce")
ROOTED_OPS = ("broadcast", "reduce", "gather", "scatter")


def signature(entry: dict[str, Any]) -> list[Any]:
    """What must agree across ranks for ``entry``'s op (shapes that differ by design are left out)."""
    op = entry["op"]
    arrays = entry["inputs"]
    described: list[Any] = [op, entry["opts"].get("reduce_op"), entry["opts"].get("root")]
    if op == "scatter" or op == "gather":
        described.append(None)  # only the root's list has tensors; the shape check is per element
    else:
        described.append([[str(array.dtype), list(array.shape)] for array in arrays])
    return described


def check_agreement(entries: list[dict[str, Any]]) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """The first rank whose call differs from the majority's, and a rank of the majority; or None."""
    signatures = [repr(signature(entry)) for entry in entries]
    counts: dict[str, int] = {}
    for text in signatures:
        counts[text] = counts.get(text, 0) + 1
    majority = max(counts, key=lambda text: (counts[text], -signatures.index(text)))
    for entry, text in zip(entries, signatures, strict=True):
        if text != majority:
            return entry, entries[signatures.index(majority)]
    return None


def describe(entry: dict[str, Any]) -> str:
    """``all_reduce(sum) float32[4, 8]`` — one call, for messages and the flight recorder."""
    opts = entry["opts"]
    detail = opts.get("reduce_op") or (f"root {opts['root']}" if opts.get("root") is not None else "")
    shapes = ", ".join(f"{array.dtype}{list(array.shape)}" for array in entry["inputs"][:4])
    if len(entry["inputs"]) > 4:
        shapes += f", … {len(entry['inputs'])} tensors"
    return f"{entry['op']}({detail}) {shapes}".rstrip()


@dataclass(frozen=True)
class Completion:
    """What a collective's complete set of entries yields: each member's outputs (by group index), the
    bytes the cost model moves, or why it cannot complete (``disagreement``: the odd and the usual
    entry; ``unsupported``: one line)."""

    outputs: dict[int, list[np.ndarray]] | None
    payload_bytes: int = 0
    disagreement: tuple[dict[str, Any], dict[str, Any]] | None = None
    unsupported: str | None = None


Reduce = Callable[[str, list[Any]], Any]
"""How a reduction is computed: ``reduce(reduce_op, arrays)`` (reduce_ops.fold, or its recorded result:
c10d.py hands one that journals it, world/journal.py)."""


def complete(
    entries: list[dict[str, Any]], size: int, reduce_order: str, reduce: Reduce = fold
) -> Completion:
    """Check that the members agree, then compute what each receives, reducing in ``reduce_order``
    (canonical: rank order; arrival: the order the contributions reached the reducer)."""
    problem = list_shape_errors(entries, size)
    disagreement = check_agreement(entries) or (
        ({**entries[0], "problem": problem}, entries[0]) if problem else None
    )
    if disagreement is not None:
        return Completion(None, disagreement=disagreement)
    order = entries
    if reduce_order == "arrival":
        order = sorted(entries, key=lambda entry: (entry["t_ns"], entry["rank"]))
    try:
        received = outputs(order, size, reduce)
    except ValueError as error:
        return Completion(None, unsupported=f"{describe(entries[0])}: {error}")
    return Completion(received, max(payload_bytes(entry) for entry in entries))


def outputs(
    entries_in_order: list[dict[str, Any]], size: int, reduce: Reduce = fold
) -> dict[int, list[np.ndarray]]:
    """Each group index's received arrays, from the entries in reduction order (the reductions by
    ``reduce``); every other op hands on its inputs, the same array objects."""
    by_index = {entry["index"]: entry for entry in entries_in_order}
    first = entries_in_order[0]
    op = first["op"]
    opts = first["opts"]
    if op == "barrier":
        return {index: [] for index in range(size)}
    if op == "all_reduce":
        reduced = _reduce_each(opts["reduce_op"], [entry["inputs"] for entry in entries_in_order], reduce)
        return {index: reduced for index in range(size)}
    if op == "reduce":
        reduced = _reduce_each(opts["reduce_op"], [entry["inputs"] for entry in entries_in_order], reduce)
        return {index: (reduced if index == opts["root"] else []) for index in range(size)}
    if op == "broadcast":
        root_inputs = by_index[opts["root"]]["inputs"]
        return {index: list(root_inputs) for index in range(size)}
    if op == "all_gather":
        gathered = [array for index in range(size) for array in by_index[index]["inputs"]]
        return {index: gathered for index in range(size)}
    if op == "gather":
        gathered = [by_index[index]["inputs"][0] for index in range(size)]
        return {index: (gathered if index == opts["root"] else []) for index in range(size)}
    if op == "scatter":
        root_inputs = by_index[opts["root"]]["inputs"]
        return {index: [root_inputs[index]] for index in range(size)}
    if op == "reduce_scatter":
        return {
            index: [reduce(opts["reduce_op"], [entry["inputs"][index] for entry in entries_in_order])]
            for index in range(size)
        }
    if op == "all_to_all":
        return {index: [by_index[source]["inputs"][index] for source in range(size)] for index in range(size)}
    raise ValueError(f"unsupported collective {op}")


def _reduce_each(reduce_op: str, inputs_in_order: list[list[np.ndarray]], reduce: Reduce) -> list[np.ndarray]:
    count = len(inputs_in_order[0])
    return [reduce(reduce_op, [inputs[position] for inputs in inputs_in_order]) for position in range(count)]


def payload_bytes(entry: dict[str, Any]) -> int:
    """Bytes this rank contributes (what the cost model moves)."""
    return int(sum(array.nbytes for array in entry["inputs"]))


def list_shape_errors(entries: list[dict[str, Any]], size: int) -> str | None:
    """Per-op list-length rules a signature cannot express (scatter's and all_to_all's N tensors)."""
    for entry in entries:
        op = entry["op"]
        expected = None
        if op in ("reduce_scatter", "all_to_all") or (
            op == "scatter" and entry["index"] == entry["opts"]["root"]
        ):
            expected = size
        if expected is not None and len(entry["inputs"]) != expected:
            return (
                f"r{entry['rank']} passed {len(entry['inputs'])} tensors to {op}, the group has {size} ranks"
            )
    return None
