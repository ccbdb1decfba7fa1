"""The training state a rank reports at its optimizer steps (rank side, imports torch).

Every optimizer step ends with one ``step`` message (torch's global step post hook: the script is
never touched). It carries the parameter digests the World compares across replicas (``params``,
when ``detect_divergence``), scalar metrics (``metrics``: ``lr`` of group 0 and ``lr/<group>`` of the
others at every step; ``grad_norm/<name>`` and ``update_ratio/<name>`` at state steps) and, every
``state_every_steps`` steps, the state itself (``state``) — as *descriptors*, not bytes: each tensor's
dtype, shape and page digests (xxh3-128 of each 64 KiB page, what the World's hash reads of an
array), which the World holds as elided arrays (sim/elided.py):

* ``params`` — the state_dict tensors of the module that owns the optimizer's parameters (its
  parameters and buffers), named as in ``state_dict()`` without DDP's ``module.`` or compile's
  ``_orig_mod.`` prefix;
* ``optimizer`` — per parameter name its optimizer state (``exp_avg``, ``momentum_buffer``, ``step``…),
  and ``param_groups`` — per group its scalar hyperparameters (``lr``, ``momentum``, ``betas``…);
* ``grads`` — each parameter's *local* gradient before any reduction: a post-accumulate-grad hook,
  registered on every parameter an optimizer is given, hashes ``.grad`` (and copies it into a buffer
  of this rank's own) when backward finished with it, before DDP's all_reduce averages it in (so a
  NaN is seen on the rank that made it). When no hook fired (FSDP2 writes the reduced gradient shard
  into ``.grad`` itself), ``.grad`` at the step;
* ``shards`` — for a DTensor parameter sharded on one mesh dimension (FSDP2's ``Shard(0)``), its
  local shard (with its bytes: the World reassembles the logical tensor from every rank's shard),
  the shard dimension and the logical shape.

**The bytes** of a state step's tensors leave the rank only when the coordinator pulls them
(``state_pull``, asked while the rank waits or lingers after its exit: :meth:`StateReporter.serve_pull`):
a recording stores the steps it keeps, and a command that needs a tensor's values rebuilds them by
re-execution. The rank keeps what a pull of its latest state step reads: the parameter and optimizer
tensors themselves (no copy: a pull comes while the rank waits, before its next step changes them)
and its local gradients, copied when the hook fired (DDP changes ``.grad`` later). A pull of a
step whose tensors together (parameters, optimizer state, local gradients) are above
``state_bytes_max`` bytes is refused (the reply says so; a pull never changes what the World sees,
so the recorder notes it); below it, a large state crosses in several pulls (state_pull.py). A GradScaler's
``update()`` reports ``scale`` (before the update) and ``found_inf`` as metrics.
"""

from __future__ import annotations

import functools
import sys
import weakref
from typing import Any

import torch

from timetravel.sim.encoding import page_digests
from timetravel.torch.rank.backend import tensor_to_wire
from timetravel.torch.rank.channel import Channel

WRAPPER_SEGMENTS = ("module", "_orig_mod", "_fsdp_wrapped_module")
"""Name segments that wrappers add (DDP, torch.compile, FSDP1): state_dict names leave them out."""


def strip_prefixes(name: str) -> str:
    """``module.0.weight`` -> ``0.weight`` (whole segments only: ``submodule.weight`` stays)."""
    return ".".join(segment for segment in name.split(".") if segment not in WRAPPER_SEGMENTS)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """The rank's own part of ``tensor`` (a DTensor's local shard), in CPU memory, contiguous: the
    tensor itself when it already is (no copy), since the step message that carries it is sent
    before the script runs on. What must outlive the moment is cloned by its caller."""
    data = tensor.detach()
    if hasattr(data, "to_local"):
        data = data.to_local()
    if data.device.type != "cpu":
        data = data.cpu()  # only off the CPU: rank_env's patched .cpu() copies even a CPU tensor
    return data.contiguous()


def _shard_dim(tensor: torch.Tensor) -> int | None:
    """The dimension a DTensor is sharded on (one Shard placement), None when it is not sharded."""
    placements = getattr(tensor, "placements", ())
    shards = [placement for placement in placements if placement.is_shard()]
    if not shards:
        return None
    if len(shards) > 1 or len(placements) > 1:
        return -1  # sharded on several mesh dimensions: only the local shard is kept
    return int(shards[0].dim)


def _descriptor(tensor: torch.Tensor, with_data: bool = False) -> dict[str, Any]:
    """What the World holds of a tensor it is not sent: dtype, shape and page digests (the World's
    array hash reads the same bytes: sim/encoding.py ``page_digests``), hashed in place. With
    ``with_data``: its bytes too (a DTensor shard the World reassembles)."""
    wire = tensor_to_wire(tensor)
    described: dict[str, Any] = {"dtype": wire["dtype"], "shape": wire["shape"]}
    described["pages"] = page_digests(wire["data"])
    if with_data:
        described["data"] = wire["data"]
    return described


_REAL_DTYPES = (torch.float32, torch.float64, torch.float16, torch.bfloat16)


def _norm(tensor: torch.Tensor) -> float:
    """The 2-norm, summed in float64. Of a real tensor without converting it first: torch widens each
    element as it reads it, to the same bits as ``vector_norm(tensor.double())`` (compared on 1,020
    tensors of 1 to 1M elements in 3 dtypes), and the metric's bits reach the World."""
    if tensor.dtype in _REAL_DTYPES:
        return float(torch.linalg.vector_norm(tensor, dtype=torch.float64))
    return float(torch.linalg.vector_norm(tensor.double()))


_INITIALISING_FRAMES_MAX = 8
"""How far up the stack a step hook looks for torch's optimizer-state initialisation (the hook runs a
few frames below ``optimizer.step``, which ``_init_optim_state`` calls directly)."""


def _initialising_state() -> bool:
    """Whether this ``optimizer.step()`` is torch.distributed.checkpoint's ``_init_optim_state``: a step
    with zero gradients and a zero learning rate that only creates the optimizer's state (before a
    ``dcp.load`` into it), not a training step — counting it would shift every later step's number."""
    frame: Any = sys._getframe(1)
    for _ in range(_INITIALISING_FRAMES_MAX):
        if frame is None:
            return False
        if frame.f_code.co_name == "_init_optim_state" and "checkpoint" in frame.f_code.co_filename:
            return True
        frame = frame.f_back
    return False


class StateReporter:
    """Holds what a rank needs between backward and the step (local grads, pre-step weights) and what
    a pull of its latest state step reads (module docstring)."""

    def __init__(
        self,
        channel: Channel,
        every: int,
        bytes_max: int,
        digests: Any,
        names: Any,
        owners: dict[int, Any],
        prefix_of: Any = None,
        shard_digests: Any = None,
    ) -> None:
        self.channel = channel
        self.every = every
        self.bytes_max = bytes_max
        self.parameter_digests = digests  # rank_setup's divergence digests (None: detect_divergence off)
        self.shard_digests = shard_digests  # the rank's own shards' digests (resume_mismatch; None: off)
        self.name_of = names
        self.owners = owners  # id(parameter) -> weakref of the module that first listed it
        self.prefix_of = prefix_of if prefix_of is not None else (lambda module: "")
        self.steps = 0
        self.hooked: dict[int, Any] = {}
        self.grads: dict[int, tuple[dict[str, Any], float]] = {}
        """This step's local gradients so far: descriptor and 2-norm, by parameter id."""
        self.grad_copies: dict[int, torch.Tensor] = {}
        """This step's local gradients as the hook saw them (buffers reused from step to step)."""
        self.latest: dict[str, Any] = {"step": 0, "tensors": {}}
        """The latest state step: its number and, by path (``params/<name>``, ``optimizer/<name>/<key>``,
        ``grads/<name>``), the tensors a pull of it sends."""
        self.latest_grads: dict[int, torch.Tensor] = {}
        """The latest state step's gradient copies, by parameter id."""
        self.spare: dict[int, torch.Tensor] = {}
        """Gradient buffers of the state step before the latest, reused for the next one."""
        self.before: dict[int, torch.Tensor] = {}

    def state_step(self) -> bool:
        return self.every > 0 and (self.steps + 1) % self.every == 0

    # -- hooks ---------------------------------------------------------------------------------

    def watch(self, parameters: Any) -> None:
        """Hash (and copy) each parameter's local gradient when backward finishes accumulating it."""
        for parameter in parameters:
            if not isinstance(parameter, torch.Tensor) or id(parameter) in self.hooked:
                continue
            if not parameter.requires_grad or not hasattr(parameter, "register_post_accumulate_grad_hook"):
                continue
            try:
                parameter.register_post_accumulate_grad_hook(self._grad_ready)
            except RuntimeError:
                continue  # not a leaf
            self.hooked[id(parameter)] = weakref.ref(parameter)

    def _grad_ready(self, parameter: torch.Tensor) -> None:
        if self.state_step() and parameter.grad is not None:
            # DDP's all_reduce averages .grad in place later: hashed now, and copied for a pull
            self.grads[id(parameter)] = self._local_grad(parameter, _local(parameter.grad))

    def _local_grad(self, parameter: torch.Tensor, grad: torch.Tensor) -> tuple[dict[str, Any], float]:
        buffer = self.spare.pop(id(parameter), None)
        if buffer is None or buffer.shape != grad.shape or buffer.dtype != grad.dtype:
            buffer = grad.clone(memory_format=torch.contiguous_format)
        else:
            buffer.copy_(grad)
        self.grad_copies[id(parameter)] = buffer
        return _descriptor(buffer), _norm(buffer)

    def before_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if _initialising_state():
            return
        if self.state_step():
            for group in optimizer.param_groups:
                for parameter in group["params"]:
                    # the step updates the parameter in place: the weights before it need their own
                    # copy, kept in float64, the precision the update ratio is computed in
                    local = _local(parameter)
                    if local.dtype in _REAL_DTYPES:
                        self.before[id(parameter)] = local.to(torch.float64, copy=True)
                    else:
                        self.before[id(parameter)] = local.clone(memory_format=torch.contiguous_format)

    def after_step(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if _initialising_state():
            return
        self.steps += 1
        message: dict[str, Any] = {"kind": "step", "step": self.steps}
        message["params"] = self.parameter_digests(optimizer) if self.parameter_digests is not None else []
        if self.shard_digests is not None:
            shards = self.shard_digests(optimizer)
            if shards:  # FSDP2: compared with the same rank's shards in the run without the crash
                message["shard_params"] = shards
        metrics = [
            ["lr" if index == 0 else f"lr/{index}", float(group["lr"])]
            for index, group in enumerate(optimizer.param_groups)
            if "lr" in group
        ]
        if self.every > 0 and self.steps % self.every == 0:
            message["state"] = self._state(optimizer, metrics)
        self.grads.clear()
        self.grad_copies.clear()
        self.before.clear()
        message["metrics"] = metrics
        self.channel.post(message)

    # -- the state -------------------------------------------------------------------------------

    def _named(self, optimizer: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
        named = []
        for group_index, group in enumerate(optimizer.param_groups):
            for position, parameter in enumerate(group["params"]):
                named.append((self.name_of(parameter, group_index, position), parameter))
        return named

    def _state(self, optimizer: torch.optim.Optimizer, metrics: list[list[Any]]) -> dict[str, Any]:
        """The step's descriptors (and the tensors a pull of this step sends, kept in ``latest``)."""
        named = self._named(optimizer)
        kept: dict[str, torch.Tensor] = {}
        described: dict[str, Any] = {"params": {}, "grads": {}, "optimizer": {}}
        shards: dict[str, Any] = {}
        for name, parameter in named:
            dim = _shard_dim(parameter)
            local = _local(parameter)
            sharded = dim is not None and dim >= 0
            described["params"][name] = _descriptor(local, with_data=sharded)
            kept[f"params/{name}"] = local
            if sharded:
                shards[name] = {"dim": dim, "shape": list(parameter.shape)}
            grad = self.grads.get(id(parameter))
            if grad is None and parameter.grad is not None:
                grad = self._local_grad(parameter, _local(parameter.grad))
            if grad is not None:
                described["grads"][name] = grad[0]
                kept[f"grads/{name}"] = self.grad_copies[id(parameter)]
                metrics.append([f"grad_norm/{name}", grad[1]])
            before = self.before.get(id(parameter))
            if before is not None and before.shape == local.shape:
                weight = _norm(before)
                change = _norm(local.double() - before.double())  # before: float64 already, not copied
                metrics.append([f"update_ratio/{name}", change / weight if weight else change])
        for name, other in self._other_entries(named):
            local = _local(other)
            described["params"][name] = _descriptor(local)
            kept[f"params/{name}"] = local
        for name, parameter in named:
            entries: dict[str, Any] = {}
            for key, value in optimizer.state.get(parameter, {}).items():
                if isinstance(value, torch.Tensor):
                    local = _local(value)
                    entries[str(key)] = _descriptor(local)
                    kept[f"optimizer/{name}/{key}"] = local
                elif isinstance(value, (int, float)) and not isinstance(value, bool):
                    entries[str(key)] = value
            if entries:
                described["optimizer"][name] = entries
        # this step's gradient copies are the latest; the previous latest ones serve the next step
        self.spare, self.latest_grads = self.latest_grads, dict(self.grad_copies)
        self.latest = {"step": self.steps, "tensors": kept}
        groups = [_hyperparameters(group) for group in optimizer.param_groups]
        return {"step": self.steps, **described, "param_groups": groups, "shards": shards}

    def _other_entries(self, named: list[tuple[str, torch.Tensor]]) -> list[tuple[str, torch.Tensor]]:
        """The state_dict tensors of the module that owns the parameters, other than the parameters
        under the names already given: buffers, parameters the optimizer is not given, and the other
        names of a tied parameter (a language-model head sharing the embedding's weight), named from
        the outermost module as the parameters are."""
        given = {name for name, _ in named}
        for _, parameter in named:
            owner = self.owners.get(id(parameter))
            module = owner() if owner is not None else None
            if module is None:
                continue
            prefix = self.prefix_of(module)
            entries = [
                (strip_prefixes(prefix + name), value)
                for name, value in module.state_dict(keep_vars=True).items()
                if isinstance(value, torch.Tensor)
            ]
            return [(name, value) for name, value in entries if name not in given]
        return []

    # -- pulls -------------------------------------------------------------------------------------

    def serve_pull(self, request: dict[str, Any]) -> None:
        """Send the bytes of the latest state step's tensors ``request["paths"]`` asks for, if the
        step asked for is still the latest (else none: ``stale``); refused when the step's tensors together
        are above ``bytes_max``."""
        step = int(request.get("step", -1))
        latest = self.latest
        reply: dict[str, Any] = {"kind": "state_bytes", "step": step, "tensors": {}}
        if latest["step"] != step:
            reply["stale"] = True
            self.channel.post(reply)
            return
        size = sum(tensor.numel() * tensor.element_size() for tensor in latest["tensors"].values())
        if size > self.bytes_max:  # said in the reply only: a pull never changes what the World sees
            reply["refused"] = f"{size} bytes of state is above state_bytes_max {self.bytes_max}"
            self.channel.post(reply)
            return
        wanted = [path for path in request.get("paths", []) if path in latest["tensors"]]
        reply["tensors"] = {path: tensor_to_wire(latest["tensors"][path]) for path in wanted}
        self.channel.post(reply)


def _hyperparameters(group: dict[str, Any]) -> dict[str, Any]:
    kept: dict[str, Any] = {}
    for key, value in group.items():
        if key == "params":
            continue
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if value is None or isinstance(value, (bool, int, float)):
            kept[key] = value
        elif isinstance(value, (tuple, list)) and all(isinstance(item, (int, float)) for item in value):
            kept[key] = list(value)
    return kept


def watch_optimizers(reporter: StateReporter) -> None:
    """Every parameter group an optimizer is given gets the local-gradient hook (before backward runs)."""
    original = torch.optim.Optimizer.add_param_group

    @functools.wraps(original)
    def add_param_group(self: torch.optim.Optimizer, param_group: dict[str, Any]) -> None:
        original(self, param_group)
        reporter.watch(self.param_groups[-1]["params"])

    torch.optim.Optimizer.add_param_group = add_param_group  # type: ignore[method-assign]


def watch_grad_scaler(channel: Channel) -> None:
    """GradScaler.update() reports the scale it used and whether it found an inf (metrics)."""
    from torch.amp import grad_scaler

    original = grad_scaler.GradScaler.update

    @functools.wraps(original)
    def update(self: Any, new_scale: Any = None) -> None:
        if self._enabled and self._scale is not None:
            found = 0.0
            for state in self._per_optimizer_states.values():
                for value in state.get("found_inf_per_device", {}).values():
                    found += float(value.item())
            for name, value in (("scale", float(self._scale.item())), ("found_inf", found)):
                channel.post({"kind": "metric", "name": name, "value": value, "step": None})
        original(self, new_scale)

    grad_scaler.GradScaler.update = update  # type: ignore[method-assign]
