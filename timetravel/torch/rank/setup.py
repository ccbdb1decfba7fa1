"""What a rank installs before the user's script runs (rank side, imports torch).

* the ``timetravel`` backend, and every process group the script makes bent onto it whatever backend,
  ``init_method`` or store it names (:mod:`.process_groups`): a rank never opens a TCPStore or a
  socket to another rank; the script's ``timeout=`` becomes its collectives' hang timeout;
* one intra-op thread and deterministic algorithms (DESIGN: same inputs, same bits);
* a global optimizer step hook that reports, after every ``optimizer.step()``, a digest of each
  parameter by name, so the World checks that data-parallel replicas agree (``divergence``), and the
  training state (:mod:`timetravel.torch.rank.state`).
"""

from __future__ import annotations

import functools
import weakref
from typing import Any

import torch
import torch.distributed as dist
import xxhash
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from timetravel.torch.protocol.limits import STATE_BYTES_MAX_DEFAULT
from timetravel.torch.rank import backend
from timetravel.torch.rank import state as rank_state
from timetravel.torch.rank.channel import Channel
from timetravel.torch.rank.process_groups import ProcessGroupDoors

_parameter_names: dict[int, str] = {}
_parameter_owners: dict[int, Any] = {}
_module_parents: dict[int, tuple[Any, str]] = {}


def install(spec: dict[str, Any], rank_channel: Channel) -> None:
    from timetravel.torch.rank.env.install import install_all
    from timetravel.torch.rank.env.loss_capture import LossCapture, install_loss_capture

    environment = spec["env"]
    settings = spec["settings"]
    if settings.get("capture_dir"):  # --against-real: first, so its file is open before the file watch
        from timetravel.torch.rank import capture as rank_capture

        rank_channel.at_script_end.append(rank_capture.install(settings["capture_dir"], spec["rank"]).finish)
    if settings.get("compute_model") == "flops":
        from timetravel.torch.rank.env.work_model import WorkMeter

        rank_channel.work_meter = WorkMeter(int(settings["compute_flops_per_s"]))
    capture = LossCapture(_stamped_sink(rank_channel), rank_channel.clock.now_ns)
    install_all(
        rank_channel.clock,
        seed_bytes=f"{spec['seed']}:{spec.get('restarts', 0)}".encode(),
        rank=spec["rank"],
        local_rank=int(spec["local_rank"]),
        local_world_size=int(spec["local_world_size"]),
        metrics_sink=_metrics_sink(rank_channel, capture),
        compile_mode=spec["settings"].get("compile", "eager"),
        cuda=spec["settings"].get("cuda", "on") == "on",
        spawn_inline=environment.get("TIMETRAVEL_LAUNCHER") == "python",
        working_directory=spec.get("cwd"),
        warn=_warning_sink(rank_channel),
        work_meter=rank_channel.work_meter,
        restarts=int(spec.get("restarts", 0)),
    )
    install_loss_capture(capture)
    rank_channel.before_blocking.append(capture.flush)
    backend.bind(rank_channel)
    ProcessGroupDoors().install()
    _remember_parameter_names()
    _remember_module_parents()
    _watch_forks(rank_channel)
    reporter = rank_state.StateReporter(
        rank_channel,
        every=int(settings.get("state_every_steps", 1)),
        bytes_max=int(settings.get("state_bytes_max", STATE_BYTES_MAX_DEFAULT)),
        digests=parameter_digests if _compares_steps(settings) else None,
        names=parameter_name,
        owners=_parameter_owners,
        prefix_of=module_prefix,
        shard_digests=functools.partial(parameter_digests, shards=True)
        if settings.get("detect_resume_mismatch", True) or settings.get("detect_silent_corruption", True)
        else None,
    )
    rank_channel.on_state_pull = reporter.serve_pull
    rank_state.watch_optimizers(reporter)
    rank_state.watch_grad_scaler(rank_channel)
    register_optimizer_step_pre_hook(reporter.before_step)
    register_optimizer_step_post_hook(reporter.after_step)
    register_optimizer_step_post_hook(lambda optimizer, args, kwargs: capture.step_done(reporter.steps))
    from timetravel.torch.rank.batches import install_batch_indices

    install_batch_indices(rank_channel, lambda: reporter.steps + 1)
    rank_channel.on_probe = functools.partial(_install_probe, rank_channel, reporter, resumed=True)
    probe = settings.get("probe")
    if probe:  # explain re-executes this rank from the start to find the first non-finite module
        _install_probe(rank_channel, reporter, probe)


def _compares_steps(settings: dict[str, Any]) -> bool:
    """Whether a detector compares the parameters' digests at optimizer steps (divergence across
    replicas; resume_mismatch and silent_corruption with a reference run)."""
    return any(
        settings.get(name, True)
        for name in ("detect_divergence", "detect_resume_mismatch", "detect_silent_corruption")
    )


def _install_probe(
    rank_channel: Channel, reporter: Any, request: dict[str, Any], resumed: bool = False
) -> None:
    """explain's module probe of optimizer step ``request["step"]`` (rank_probe.py): at the start,
    or asked for while the rank waits in a process a probe re-execution resumed from a checkpoint.
    Refused (one ``probe`` message saying why) when this process may be inside that step already:
    its forward hooks would have missed the modules that ran before them."""
    from timetravel.torch.rank.probe import ModuleProbe

    step = int(request["step"])
    ops = request.get("ops")
    # a whole step's hooks need a process that cannot be inside it yet; diff --ops may also start now,
    # mid-step, on both branches at one event (then it needs a process not past the step)
    latest = step - 1 if isinstance(ops, dict) and ops.get("whole_step") is False else step - 2
    if resumed and reporter.steps > latest:
        why = f"the rank had completed {reporter.steps} optimizer steps: it may be in step {step} already"
        if latest == step - 1:
            why = f"the rank had completed {reporter.steps} optimizer steps: step {step} is over"
        rank_channel.post({"kind": "probe", "step": step, "finding": None, "refused": why})
        return
    if isinstance(ops, dict):  # diff --ops: hash every op of the step (rank/op_trace.py)
        from timetravel.torch.rank.op_trace import OpTrace

        trace = OpTrace(rank_channel, step, lambda: reporter.steps, module_names, ops.get("capture"))
        trace.install()
        register_optimizer_step_post_hook(lambda optimizer, args, kwargs: trace.step_done())
        return
    hooks = ModuleProbe(rank_channel, step, lambda: reporter.steps, module_names)
    hooks.install()
    register_optimizer_step_post_hook(lambda optimizer, args, kwargs: hooks.step_done())
    if request.get("init") and not resumed:  # from the start: which parameters were never written
        from timetravel.torch.rank.init_watch import InitWatch

        InitWatch(rank_channel, step, parameter_fqn).install()


def parameter_fqn(module: torch.nn.Module, name: str) -> str:
    """A parameter's name from the outermost module that holds it (``blocks.0.fc1.weight``)."""
    return rank_state.strip_prefixes(module_prefix(module) + name)


def _metrics_sink(rank_channel: Channel, capture: Any) -> Any:
    """``timetravel.torch.metric``, SummaryWriter.add_scalar and wandb.log become World metrics
    (a ``loss`` of the script's own replaces the captured one: ``rank_env.loss_capture``)."""

    def sink(name: str, value: float, step: int | None) -> None:
        capture.script_metric(name)
        rank_channel.post({"kind": "metric", "name": name, "value": value, "step": step})

    return sink


def _stamped_sink(rank_channel: Channel) -> Any:
    """The captured loss: a metric stamped with the optimizer step's logical time."""

    def send(name: str, value: float, step: int, t_ns: int) -> None:
        rank_channel.post({"kind": "metric", "name": name, "value": value, "step": step}, t_ns=t_ns)

    return send


def _warning_sink(rank_channel: Channel) -> Any:
    """A rank-environment warning (``write_outside_workdir``) joins the run's summary warnings."""

    def warn(name: str, detail: str) -> None:
        rank_channel.post({"kind": "warning", "name": name, "detail": detail[-2000:]})

    return warn


def _watch_forks(rank_channel: Channel) -> None:
    """Warn ``fork_after_init`` when the rank forks after init_process_group, and cut the child loose.

    A forked child (a DataLoader worker, a multiprocessing fork) must never speak on the rank's
    channel: it gets its own stdout/stderr on the inherited file descriptors and no channel at all.
    A real cluster's version of this bug is the second article's: state a fork does not copy."""
    import os
    import sys
    import traceback

    from timetravel.torch.rank.checkpoint import forking

    def before_fork() -> None:
        if forking[0]:
            return  # a checkpoint of this rank, not the script's fork
        if dist.is_initialized():
            where = "".join(traceback.format_stack(limit=6)[:-1])
            rank_channel.post({"kind": "warning", "name": "fork_after_init", "detail": where[-2000:]})

    def in_child() -> None:
        if forking[0]:
            return
        backend.unbind()
        sys.stdout = os.fdopen(os.dup(2), "w", buffering=1)
        sys.stderr = sys.stdout

    os.register_at_fork(before=before_fork, after_in_child=in_child)


def _environment(name: str) -> str:
    import os

    return os.environ[name]


def _remember_parameter_names() -> None:
    """Record each parameter's name when a module lists it (DDP's prefix stripped; the longest wins)."""
    original = torch.nn.Module.named_parameters

    @functools.wraps(original)
    def named_parameters(self: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        for name, parameter in original(self, *args, **kwargs):
            key = id(parameter)
            known = _parameter_names.get(key)
            stripped = rank_state.strip_prefixes(name)
            # the most qualified name wins: fully_shard(block) lists ``norm1.weight`` before the
            # optimizer's model.parameters() lists ``blocks.0.norm1.weight``
            if known is None or (len(stripped) > len(known) and stripped.endswith("." + known)):
                _parameter_names[key] = stripped
                _parameter_owners[key] = weakref.ref(self)
            yield name, parameter

    torch.nn.Module.named_parameters = named_parameters  # type: ignore[method-assign]


def parameter_name(parameter: torch.Tensor, group: int, position: int) -> str:
    """The parameter's name from the outermost module that holds it (``0.weight``, not ``weight``,
    when the script listed a submodule's parameters: ``{"params": model[0].parameters()}``)."""
    name = _parameter_names.get(id(parameter))
    if name is None:
        return f"param_groups.{group}.{position}"
    owner = _parameter_owners.get(id(parameter))
    module = owner() if owner is not None else None
    return rank_state.strip_prefixes(module_prefix(module) + name) if module is not None else name


def module_prefix(module: torch.nn.Module) -> str:
    """``blocks.0.`` for a module held as ``blocks[0]`` of an outer one ('' for an outermost module)."""
    path: list[str] = []
    seen: set[int] = set()
    while id(module) not in seen and len(path) < 64:
        seen.add(id(module))
        parent = _module_parents.get(id(module))
        holder = parent[0]() if parent is not None else None
        if parent is None or holder is None:
            break
        path.insert(0, parent[1])
        module = holder
    return "".join(f"{segment}." for segment in path)


def module_names() -> dict[int, str]:
    """id(module) -> its name from the outermost module, for every module of every model whose
    parameters a module listed (``0`` for ``model[0]`` under DDP; '' for the outermost)."""
    names: dict[int, str] = {}
    roots: dict[int, torch.nn.Module] = {}
    for owner in list(_parameter_owners.values()):
        module = owner()
        if module is not None:
            roots.setdefault(id(module), module)
    for root in roots.values():
        prefix = module_prefix(root)
        for name, module in root.named_modules():
            names.setdefault(id(module), rank_state.strip_prefixes(prefix + name))
    return names


def _remember_module_parents() -> None:
    """Which module holds which submodule under which attribute (set when it is assigned)."""
    from torch.nn.modules.module import register_module_module_registration_hook

    def hook(module: torch.nn.Module, name: str, submodule: Any) -> None:
        if isinstance(submodule, torch.nn.Module):
            _module_parents[id(submodule)] = (weakref.ref(module), name)

    register_module_module_registration_hook(hook)


def parameter_digests(optimizer: torch.optim.Optimizer, shards: bool = False) -> list[list[Any]]:
    """Name, shape, dtype and xxh3-64 of each replicated parameter (a DTensor shard is left out: ranks
    hold different parts by design); with ``shards``, of each DTensor shard the rank holds instead
    (what resume_mismatch compares with the same rank of the run without the crash)."""
    digests = []
    for group_index, group in enumerate(optimizer.param_groups):
        for position, parameter in enumerate(group["params"]):
            placements = getattr(parameter, "placements", ())
            if any(placement.is_shard() for placement in placements) != shards:
                continue
            data = parameter.detach()
            if hasattr(data, "to_local"):
                data = data.to_local()
            if data.device.type != "cpu":
                data = data.cpu()  # only off the CPU: rank_env's patched .cpu() copies even a CPU tensor
            flat = data.reshape(-1)  # a 0-dim parameter (nn.Parameter(torch.tensor(1.0))) has no byte view
            raw = flat.view(torch.uint8) if flat.dtype != torch.bool else flat.to(torch.uint8)
            digests.append(
                [
                    parameter_name(parameter, group_index, position),
                    list(data.shape),
                    str(data.dtype).removeprefix("torch."),
                    xxhash.xxh3_64_hexdigest(raw.numpy()),  # hashed in place, not copied to bytes
                ]
            )
    return digests
