"""The training state in the World (coordinator side): what a rank's ``step`` message carries, stored.

A rank's optimizer step (:mod:`timetravel.torch.rank_state`) becomes, at the step's logical time, a
``state`` event on the rank's own node (a handler changes only its own node), whose handler writes:

* ``nodes/rN/params/<name>`` — state_dict tensors (parameters and buffers) as numpy arrays, names
  without ``module.``/``_orig_mod.``; for an FSDP2/DTensor parameter sharded on one dimension, the
  *logical* tensor (every rank's shard concatenated along it), the same on every rank, once every
  rank's shard of that step reached ``c10d``; the rank's own shard is at ``nodes/rN/shards/<name>``;
* ``nodes/rN/optimizer/<name>/<key>`` — optimizer state per parameter (``exp_avg``, ``step``…) and
  ``nodes/rN/optimizer/param_groups/<g>/<hyperparameter>`` (``lr``…);
* ``nodes/rN/grads/<name>`` — the local gradient before reduction (an FSDP2 shard: its reduced shard);
* ``nodes/rN/state_step`` — the rank's optimizer step the state is of (``state_digests`` instead of
  tensors when the step was above ``state_bytes_max``);
* metrics ``lr``, ``lr/<g>``, ``grad_norm/<name>``, ``update_ratio/<name>`` on the rank's node.

The logical tensors of sharded parameters travel through ``c10d``: the step message keeps the shards
(``c10d.on_step`` waits for every rank's report anyway), :func:`collect_shards` gathers them there and
delivers ``logical`` events to every rank when a step's shards are complete.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from timetravel.sim.context import Context
from timetravel.sim.event import Event
from timetravel.torch import arrays


def on_step_message(message: dict[str, Any], t_ns: int, ctx: Context) -> None:
    """On the rank's node, from ``on_poll``: the state goes to this node at ``t_ns``; digests go on."""
    payload = message.pop("state", None)
    metrics = message.pop("metrics", [])
    if payload is None and not metrics:
        return
    shards = (payload or {}).get("shards") or {}
    if shards:  # the shards go on to c10d, which reassembles the logical tensors
        message["shards"] = {name: {**info, "data": payload["params"][name]} for name, info in shards.items()}
    ctx.deliver(
        t_ns,
        ctx.node,
        "state",
        {
            "step": message["step"],
            "metrics": metrics,
            "state": payload,
            "incarnation": message["incarnation"],
        },
    )


def on_state(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """Write the reported state into this rank's node and its metrics."""
    if event.payload["incarnation"] != state["incarnation"]:
        return  # sent by a rank process a restart has replaced
    for name, value in event.payload["metrics"]:
        ctx.metric(str(name), float(value))
    payload = event.payload["state"]
    if payload is None:
        return
    state["state_step"] = int(payload["step"])
    groups = {str(index): dict(group) for index, group in enumerate(payload.get("param_groups", []))}
    if "digests" in payload:
        state["state_digests"] = dict(payload["digests"])
        state["optimizer"] = {"param_groups": groups}
        for part in ("params", "grads", "shards"):
            state.pop(part, None)
        return
    state.pop("state_digests", None)
    shards = payload.get("shards") or {}
    # a sharded parameter's logical tensor arrives with ``logical`` once every rank's shard did
    state["params"] = {
        name: arrays.decode(wire) for name, wire in payload["params"].items() if name not in shards
    }
    state["shards"] = {name: arrays.decode(payload["params"][name]) for name in shards}
    if not state["shards"]:
        del state["shards"]
    state["grads"] = {name: arrays.decode(wire) for name, wire in payload["grads"].items()}
    optimizer: dict[str, Any] = {"param_groups": groups}
    for name, entries in payload["optimizer"].items():
        optimizer[name] = {
            key: arrays.decode(value) if isinstance(value, dict) else value for key, value in entries.items()
        }
    state["optimizer"] = optimizer


def collect_shards(c10d_state: dict[str, Any], message: dict[str, Any], ranks: int, ctx: Context) -> None:
    """On ``c10d``: keep a step's shards until every rank's arrived, then send the logical tensors."""
    shards = message.get("shards")
    if not shards:
        return
    step = str(message["step"])
    pending = c10d_state.setdefault("shards", {}).setdefault(step, {})
    pending[str(message["rank"])] = shards
    if len(pending) < ranks:
        return
    del c10d_state["shards"][step]
    logical = assemble(pending)
    for rank in sorted(pending, key=int):
        ctx.deliver(ctx.now, f"r{rank}", "logical", {"step": int(step), "params": logical})


def assemble(pending: dict[str, dict[str, Any]]) -> dict[str, np.ndarray]:
    """Per name, the rank-ordered shards concatenated along their dimension (FSDP2's Shard(dim)).

    A shard FSDP2 padded (a dimension that does not divide by the ranks) is cut back to the logical
    shape; a name whose shards do not add up to it is left out (its local shards stay)."""
    ranks = sorted(pending, key=int)
    names = sorted(set.intersection(*(set(pending[rank]) for rank in ranks)))
    logical = {}
    for name in names:
        infos = [pending[rank][name] for rank in ranks]
        dim, shape = int(infos[0]["dim"]), list(infos[0]["shape"])
        if any(int(info["dim"]) != dim or list(info["shape"]) != shape for info in infos):
            continue
        parts = [arrays.decode(info["data"]) for info in infos]
        whole = np.concatenate(parts, axis=dim) if parts[0].ndim > dim else None
        if whole is None or whole.shape[dim] < shape[dim]:
            continue
        whole = np.take(whole, np.arange(shape[dim]), axis=dim)
        if list(whole.shape) == shape:
            logical[name] = whole
    return logical


def on_logical(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """The logical tensors of a step's sharded parameters: the same on every rank."""
    if state.get("state_step") != event.payload["step"]:
        return  # a later step's state already arrived (or the state was digests only)
    params = state.setdefault("params", {})
    for name, array in event.payload["params"].items():
        params[name] = array
