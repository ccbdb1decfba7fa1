"""The training state in the World (coordinator side): what a rank's ``step`` message carries, stored.

A rank's optimizer step (:mod:`timetravel.torch.rank.state`) reaches ``on_poll`` of the rank's node,
which keeps the decoded tensors in its own state (``state_incoming/<step>``: tensors never ride an
event, whose payload the recording's event stream and the hash chain would carry) and schedules a
small ``state`` event to itself at the step's logical time; its handler moves them into place:

* ``nodes/rN/params/<name>`` — state_dict tensors (parameters and buffers), named
  without ``module.``/``_orig_mod.``; for an FSDP2/DTensor parameter sharded on one dimension, the
  *logical* tensor (every rank's shard concatenated along it, padding cut), the same on every rank,
  written once every rank stored its shard of that step; the rank's own shard is at
  ``nodes/rN/shards/<name>`` (with ``shards_layout/<name>``: dim and logical shape);
* ``nodes/rN/optimizer/<name>/<key>`` — optimizer state per parameter (``exp_avg``, ``step``…; of a
  sharded parameter: the rank's shard) and ``nodes/rN/optimizer/param_groups/<g>/<hyperparameter>``;
* ``nodes/rN/grads/<name>`` — the local gradient before reduction (an FSDP2 parameter: its reduced
  shard, as FSDP2 writes ``.grad`` itself);
* ``nodes/rN/state_step`` — the rank's optimizer step the state is of;
* metrics ``lr``, ``lr/<g>``, ``grad_norm/<name>``, ``update_ratio/<name>`` on the rank's node.

The tensors are **elided arrays** (sim/elided.py): the step message describes each by dtype, shape
and page digests, and its bytes stay in the rank (a DTensor shard's come, for the reassembly). A
recording pulls the bytes of the steps it keeps (world/state_pull.py), and a command that needs the
values of another step rebuilds them by re-execution: the World's hash is the same either way.

Reassembly: the ``step`` message that goes on to ``c10d`` says ``sharded``; when every rank's sharded
step arrived, :func:`collect_shards` sends each rank a ``logical`` event (a step number), whose
handler reads the peers' shards (reading another node's state is deterministic; only writing is the
node's own) and writes the logical tensors into its own node.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from timetravel.sim.context import Context
from timetravel.sim.elided import ElidedArray
from timetravel.sim.event import Event
from timetravel.torch.protocol import arrays
from timetravel.torch.protocol.limits import BATCH_INDICES_MAX
from timetravel.torch.world import duplicates


def on_step_message(state: dict[str, Any], message: dict[str, Any], t_ns: int, ctx: Context) -> None:
    """On the rank's node, from ``on_poll``: keep the state, store it at ``t_ns``; digests go on."""
    payload = message.pop("state", None)
    metrics = message.pop("metrics", [])
    if payload is None and not metrics:
        return
    step = int(message["step"])
    if payload is not None:
        try:
            state.setdefault("state_incoming", {})[str(step)] = _decoded(payload)
        except (arrays.TensorFormatError, KeyError, TypeError) as error:
            ctx.fail("exception", f"{ctx.node} sent a malformed state: {error}", "torch.rank.protocol")
            return
        if payload.get("shards"):
            message["sharded"] = True
    body = {"step": step, "metrics": metrics, "incarnation": message["incarnation"]}
    ctx.deliver(t_ns, ctx.node, "state", body)


def _decoded(payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "step": payload["step"],
        "params": {name: held(described) for name, described in payload["params"].items()},
        "grads": {name: held(described) for name, described in payload["grads"].items()},
        "optimizer": {
            name: {key: held(value) if isinstance(value, dict) else value for key, value in entries.items()}
            for name, entries in payload["optimizer"].items()
        },
        "param_groups": payload["param_groups"],
        "shards": {
            name: {"dim": int(info["dim"]), "shape": list(info["shape"])}
            for name, info in payload["shards"].items()
        },
    }


def held(described: dict[str, Any]) -> np.ndarray | ElidedArray:
    """What the World holds of a tensor a step message describes: an elided array (its dtype, shape
    and page digests: rank/state.py), the array itself when its bytes came (a DTensor shard)."""
    if "data" in described:
        return arrays.decode(described)
    return arrays.described(described)


def payloads_elided(world: Any) -> bool:
    """Whether a tensor in flight — a call's inputs a rank posted, an entry's, a result, a result on
    its way — is held as digests only (a world restored from a torch recording's snapshot): such a
    world cannot run on until they are rebuilt (world_source.py). Training state may stay elided:
    nothing the World does reads its values."""
    c10d = world.nodes.get("c10d") or {}
    held: list[Any] = [c10d.get("ops"), c10d.get("results"), c10d.get("delivering")]
    held.extend((node or {}).get("outbox") for name, node in world.nodes.items() if name.startswith("r"))
    return any(_has_elided(value) for value in held)


def held_elided(world: Any) -> bool:
    """Whether any tensor of the world is held as digests only (training state or in flight)."""
    return any(_has_elided(node) for node in world.nodes.values())


def _has_elided(value: Any) -> bool:
    if isinstance(value, ElidedArray):
        return True
    if isinstance(value, dict):
        return any(_has_elided(item) for item in value.values())
    if isinstance(value, list):
        return any(_has_elided(item) for item in value)
    return False


def on_state(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """Move the step's state into this rank's node and record its metrics."""
    if event.payload["incarnation"] != state["incarnation"]:
        return  # sent by a rank process a restart has replaced
    for name, value in event.payload["metrics"]:
        ctx.metric(str(name), float(value))
    incoming = state.get("state_incoming", {})
    payload = incoming.pop(str(event.payload["step"]), None)
    if not incoming:
        state.pop("state_incoming", None)
    if payload is None:
        return
    state["state_step"] = int(payload["step"])
    groups = {str(index): dict(group) for index, group in enumerate(payload["param_groups"])}
    for part in ("params", "grads", "shards", "shards_layout"):
        state.pop(part, None)
    layout = payload["shards"]
    # a sharded parameter's logical tensor arrives with ``logical`` once every rank's shard did
    state["params"] = {name: array for name, array in payload["params"].items() if name not in layout}
    if layout:
        state["shards"] = {name: payload["params"][name] for name in layout}
        state["shards_layout"] = layout
    state["grads"] = payload["grads"]
    state["optimizer"] = {"param_groups": groups, **payload["optimizer"]}


def collect_shards(c10d_state: dict[str, Any], message: dict[str, Any], ranks: int, ctx: Context) -> None:
    """On ``c10d``: when every rank's sharded state of a step is stored, each rank assembles it."""
    if not message.get("sharded"):
        return
    step = str(message["step"])
    pending = c10d_state.setdefault("sharded_steps", {})
    pending[step] = pending.get(step, 0) + 1
    if pending[step] < ranks:
        return
    del pending[step]
    for rank in range(c10d_state["ranks"]):
        if str(rank) not in c10d_state["exited"]:
            ctx.deliver(ctx.now, f"r{rank}", "logical", int(step))


def on_logical(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """Write the logical tensors of this step's sharded parameters from every rank's shard."""
    step = event.payload
    if state.get("state_step") != step or "shards" not in state:
        return  # a later step's state arrived already
    peers = [
        ctx.world.nodes[name]
        for name in sorted(ctx.world.nodes, key=_rank_order)
        if ctx.world.nodes[name] is not None and name.startswith("r") and name[1:].isdigit()
    ]
    if any(peer.get("state_step") != step or "shards" not in peer for peer in peers):
        return
    shards = [peer["shards"] for peer in peers]
    layout = state["shards_layout"]
    state["params"].update(ctx.processes.computed(ctx.event, lambda: assemble(shards, layout)))


def _rank_order(name: str) -> tuple[int, str]:
    return (int(name[1:]), name) if name[1:].isdigit() else (-1, name)


def assemble(shards: list[dict[str, np.ndarray]], layout: dict[str, dict[str, Any]]) -> dict[str, np.ndarray]:
    """Per name, the rank-ordered shards concatenated along their dimension (FSDP2's Shard(dim)).

    A shard FSDP2 padded (a dimension that does not divide by the ranks) is cut back to the logical
    shape; a name whose shards do not add up to it is left out (its local shards stay)."""
    logical = {}
    for name, info in sorted(layout.items()):
        parts = [held[name] for held in shards if name in held]
        dim, shape = info["dim"], info["shape"]
        if len(parts) != len(shards) or any(part.ndim != len(shape) for part in parts):
            continue
        whole = np.concatenate(parts, axis=dim)
        if whole.shape[dim] < shape[dim]:
            continue
        whole = np.take(whole, np.arange(shape[dim]), axis=dim)
        if list(whole.shape) == shape:
            logical[name] = whole
    return logical


def on_batch(state: dict[str, Any], event: Event, ctx: Context) -> None:
    """A DataLoader batch the rank received (torch/rank_batches.py): ``nodes/rN/batch`` holds the
    sampler indices of the batches of its current optimizer step — ``step``, ``indices`` (at most
    ``BATCH_INDICES_MAX``, the rest counted in ``indices_dropped``) and ``batches`` (gradient
    accumulation loads several per step). A new step's first batch replaces the previous step's."""
    payload = event.payload
    if payload["incarnation"] != state["incarnation"]:
        return
    step = int(payload["step"])
    batch = state.get("batch")
    if not isinstance(batch, dict) or batch.get("step") != step:
        batch = {"step": step, "indices": [], "batches": 0, "indices_dropped": 0}
    indices = [int(index) for index in payload["indices"]]
    room = max(BATCH_INDICES_MAX - len(batch["indices"]), 0)
    state["batch"] = {
        "step": step,
        "indices": batch["indices"] + indices[:room],
        "batches": batch["batches"] + 1,
        "indices_dropped": batch["indices_dropped"] + max(len(indices) - room, 0) + int(payload["dropped"]),
    }
    duplicates.check(state, indices, ctx)
