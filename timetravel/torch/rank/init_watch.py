"""explain's watch of uninitialised parameters (rank side, imports torch).

The classic meta-device bug: a model built on ``meta`` (or whose parameters come from ``torch.empty``)
gets memory from ``to_empty()`` and is then initialised by ``init_weights`` / ``reset_parameters`` —
which forget some modules. Those parameters hold whatever the allocator left; under deterministic
algorithms that is NaN (``fill_uninitialized_memory``), on a GPU garbage that may train "fine" for a
while. The NaN fill alone cannot tell: a filled NaN looks like a computed one, integers get their
max value, and a script may switch the mode off. So explain re-executes the failing rank from the
start with this watch (``settings["probe"]["init"]``, torch/world/module_probe.py):

* a ``TorchDispatchMode``, from the rank's start to its **first forward** (any module's), sees every
  op; each op schema's alias information says which arguments it writes (``Tensor(a!)``, ``out=``).
  Bytes an ``empty`` op allocates are *uninitialised* (with their origin: the op, the user's line,
  and the ``to_empty`` call it ran under); a write initialises the bytes it covers — unless what it
  read was uninitialised (``copy_`` of garbage, ``mul_(0)`` of NaN stays garbage): then the written
  bytes inherit the origin. DTensor ops are seen at the DTensor level (their local shard is what
  they write);
* at the first forward it reports, in one ``probe`` message (``init``), every parameter (fully
  qualified name) holding uninitialised bytes, where their memory came from, the ``to_empty`` call
  sites, the last write to a parameter that ran (the last init call) and whether deterministic
  mode's NaN fill corroborates it (the parameter's NaN count);
* then, at the first collective whose input is non-finite, it maps that input back to parameters
  (``collective``): for FSDP2's flat all_gather input, by the parameters the all_gather packs
  (``foreach_all_gather``'s ``fsdp_params``, in order, each its padded shard); otherwise by the
  parameters whose memory an input is.

Everything here only reads: no value is written, no random number drawn, so the rank computes the
same bits and the World sees the same events (the probe's re-execution checks its hash chain).
"""

from __future__ import annotations

import collections
import os
import sys
import sysconfig
import weakref
from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from timetravel.torch.rank.channel import Channel
from timetravel.torch.rank.memory_ranges import Extent, MemoryRanges, extent, overlaps

ALLOCATING_OPS = frozenset(
    {
        "aten::empty",
        "aten::empty_like",
        "aten::empty_strided",
        "aten::new_empty",
        "aten::new_empty_strided",
        "aten::empty_permuted",
    }
)
"""Ops whose output is uninitialised memory."""
OVERWRITING_OPS = frozenset(
    {
        "aten::fill_",
        "aten::zero_",
        "aten::normal_",
        "aten::uniform_",
        "aten::copy_",
        "aten::bernoulli_",
        "aten::random_",
        "aten::exponential_",
        "aten::log_normal_",
        "aten::cauchy_",
        "aten::geometric_",
        "aten::_foreach_copy_",
        "aten::_foreach_zero_",
    }
)
"""In-place ops that do not read what they overwrite (any other in-place op reads it: ``mul_(0)`` of
garbage is garbage)."""
WRITES_KEPT = 4096
"""The last writes remembered (the last one to a parameter is the last init call that ran)."""
ORIGINS_MAX = 1024
PARAMETERS_LISTED_MAX = 64
SEGMENTS_MAX = 256
COLLECTIVES_CHECKED_MAX = 10_000
"""Collectives looked at for a non-finite input after the first forward (then the watch ends)."""
_NOT_THE_USERS = (
    os.path.dirname(torch.__file__) + os.sep,
    os.path.dirname(os.path.dirname(os.path.dirname(__file__))) + os.sep,  # timetravel/
    *sorted({sysconfig.get_paths()[name] + os.sep for name in ("stdlib", "platstdlib")}),
    "<",
)


def user_site() -> str:
    """``path:line in function`` of the innermost frame of the user's code (not torch, not the
    simulator, not the standard library; the path relative to where the user launched from when it
    is under it), '' when there is none."""
    frame: Any = sys._getframe(1)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(_NOT_THE_USERS):
            launched = os.environ.get("TIMETRAVEL_LAUNCH_DIR", "")
            if launched and path.startswith(launched.rstrip(os.sep) + os.sep):
                path = os.path.relpath(path, launched)
            return f"{path}:{frame.f_lineno} in {frame.f_code.co_name}"
        frame = frame.f_back
    return ""


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [item for item in value if isinstance(item, torch.Tensor)]
    return []


class InitWatch(TorchDispatchMode):
    """See the module docstring. ``fqn(module, name)``: a parameter's fully qualified name."""

    def __init__(self, channel: Channel, step: int, fqn: Callable[[torch.nn.Module, str], str]) -> None:
        super().__init__()
        self.channel = channel
        self.step = step
        self.fqn = fqn
        self.memory = MemoryRanges()
        self.origins: list[dict[str, str]] = []
        self._origin_index: dict[tuple[str, str, str], int] = {}
        self.writes: collections.deque[tuple[Extent, str, str]] = collections.deque(maxlen=WRITES_KEPT)
        self.registered: list[tuple[weakref.ref[torch.nn.Module], str]] = []
        self.materialising: list[str] = []
        """The user's ``to_empty`` call sites in progress (innermost last)."""
        self.materialised: list[str] = []
        self.watching = True
        self.broken = ""
        self.fsdp_params: Any = None
        self.collectives_checked = 0
        self._handles: list[Any] = []
        self._restore: list[Callable[[], None]] = []

    # -- installing ---------------------------------------------------------------------------------

    def install(self) -> None:
        from torch.nn.modules.module import (
            register_module_forward_pre_hook,
            register_module_parameter_registration_hook,
        )

        self._handles.append(register_module_parameter_registration_hook(self._registered))
        self._handles.append(register_module_forward_pre_hook(self._first_forward))
        self._wrap_to_empty()
        self._wrap_fsdp_all_gather()
        self.__enter__()

    def _registered(self, module: torch.nn.Module, name: str, parameter: Any) -> None:
        if self.watching and len(self.registered) < 1_000_000:
            self.registered.append((weakref.ref(module), name))

    def _wrap_to_empty(self) -> None:
        original = torch.nn.Module.to_empty
        watch = self

        def to_empty(module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
            site = user_site()
            watch.materialising.append(site)
            if site not in watch.materialised:
                watch.materialised.append(site)
            try:
                return original(module, *args, **kwargs)
            finally:
                watch.materialising.pop()

        torch.nn.Module.to_empty = to_empty  # type: ignore[method-assign,assignment]
        self._restore.append(lambda: setattr(torch.nn.Module, "to_empty", original))

    def _wrap_fsdp_all_gather(self) -> None:
        """FSDP2 packs a group's parameters into one flat all_gather input: remember which, while it
        runs, so the input can be mapped back to them (no FSDP2, or another layout: no mapping)."""
        try:
            from torch.distributed.fsdp._fully_shard import _fsdp_param_group as param_group
        except ImportError:
            return
        original = getattr(param_group, "foreach_all_gather", None)
        if original is None:
            return
        watch = self

        def foreach_all_gather(fsdp_params: Any, *args: Any, **kwargs: Any) -> Any:
            watch.fsdp_params = fsdp_params
            try:
                return original(fsdp_params, *args, **kwargs)
            finally:
                watch.fsdp_params = None

        param_group.foreach_all_gather = foreach_all_gather
        self._restore.append(lambda: setattr(param_group, "foreach_all_gather", original))

    # -- the ops ------------------------------------------------------------------------------------

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if self.watching and not self.broken:
            try:
                self._note(func, args, kwargs, out)
            except Exception as error:  # the watch must never change what the script does
                self.broken = f"{type(error).__name__}: {error}"
        return out

    def _note(self, func: Any, args: Any, kwargs: dict[str, Any], out: Any) -> None:
        schema = func._schema
        name = schema.name
        written: list[torch.Tensor] = []
        read: list[torch.Tensor] = []
        for position, argument in enumerate(schema.arguments):
            value = args[position] if position < len(args) else kwargs.get(argument.name)
            tensors = _tensors(value)
            alias = argument.alias_info
            if alias is not None and alias.is_write:
                written += tensors
                if name not in OVERWRITING_OPS and not argument.kwarg_only:
                    read += tensors  # an in-place op reads what it updates (out= is never read)
            else:
                read += tensors
        source = self._source(read)
        for tensor in written:
            where = extent(tensor)
            if where is not None:
                self.memory.set(where, source)
                self.writes.append((where, name, user_site()))
        returns = schema.returns
        for position, tensor in enumerate(_tensors(out) if len(returns) <= 1 else list(out)):
            if not isinstance(tensor, torch.Tensor) or position >= len(returns):
                continue
            if returns[position].alias_info is not None:
                continue  # a view or the updated argument: its memory was handled above
            where = extent(tensor)
            if where is not None:
                self.memory.set(where, self._allocation(name) if name in ALLOCATING_OPS else source)
        if self.memory.overflowed:
            self.broken = "too many separate uninitialised ranges to follow"

    def _source(self, read: list[torch.Tensor]) -> int | None:
        """The origin of the first uninitialised byte among what the op read (None: all written)."""
        for tensor in read:
            where = extent(tensor)
            if where is not None:
                origin = self.memory.origin(where)
                if origin is not None:
                    return origin
        return None

    def _allocation(self, op: str) -> int:
        how = "to_empty" if self.materialising else op.removeprefix("aten::")
        site = self.materialising[-1] if self.materialising else user_site()
        key = (op, how, site)
        known = self._origin_index.get(key)
        if known is not None:
            return known
        if len(self.origins) >= ORIGINS_MAX:
            return len(self.origins) - 1
        self.origins.append({"op": op, "how": how, "site": site})
        self._origin_index[key] = len(self.origins) - 1
        return len(self.origins) - 1

    # -- the first forward: the report ----------------------------------------------------------------

    def _first_forward(self, module: torch.nn.Module, inputs: Any) -> None:
        if not self.watching:
            return
        self.watching = False
        self._leave()
        try:
            report = self._report()
        except Exception as error:  # never the script's failure: say what went wrong
            report = {"broken": f"{type(error).__name__}: {error}"}
        self.channel.post({"kind": "probe", "step": self.step, "init": report})
        self.channel.call_observers.append(self._collective)

    def close(self) -> None:
        """Leave everything as before :meth:`install` (the rank's process ends instead; a test calls it)."""
        self.watching = False
        self._leave()
        for restore in self._restore:
            restore()
        if self._collective in self.channel.call_observers:
            self.channel.call_observers.remove(self._collective)

    def _leave(self) -> None:
        from torch.utils._python_dispatch import _get_current_dispatch_mode, _pop_mode

        if _get_current_dispatch_mode() is self:
            _pop_mode()
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        for restore in self._restore[:1]:  # to_empty; FSDP2's all_gather stays wrapped for the mapping
            restore()

    def parameters(self) -> list[tuple[str, torch.Tensor]]:
        """(fully qualified name, parameter) of every parameter registered while watching, each once."""
        seen: set[int] = set()
        found: list[tuple[str, torch.Tensor]] = []
        for module_ref, name in self.registered:
            module = module_ref()
            parameter = module._parameters.get(name) if module is not None else None
            if parameter is None or id(parameter) in seen:
                continue  # gone, or listed already (registered twice, or shared by two modules)
            seen.add(id(parameter))
            found.append((self.fqn(module, name), parameter))  # type: ignore[arg-type]
        return found

    def _report(self) -> dict[str, Any]:
        uninitialised = []
        extents = []
        parameters = self.parameters()
        for name, parameter in parameters:
            where = extent(parameter)
            if where is None:
                continue
            extents.append((where, name))
            missing = self.memory.uninitialised_bytes(where)
            if missing:
                uninitialised.append(self._described(name, parameter, where, missing))
        return {
            "parameters": len(parameters),
            "uninitialised": uninitialised[:PARAMETERS_LISTED_MAX],
            "uninitialised_count": len(uninitialised),
            "materialised": self.materialised,
            "last_init": self._last_init(extents),
            "deterministic_fill": bool(
                torch.are_deterministic_algorithms_enabled()
                and torch.utils.deterministic.fill_uninitialized_memory  # type: ignore[attr-defined]
            ),
            "broken": self.broken,
        }

    def _described(self, name: str, parameter: torch.Tensor, where: Extent, missing: int) -> dict[str, Any]:
        local = getattr(parameter, "_local_tensor", parameter).detach()
        nan = int(torch.isnan(local).sum()) if local.is_floating_point() else 0
        origin = self.memory.origin(where)
        return {
            "name": name,
            "shape": list(parameter.shape),
            "local_shape": list(local.shape),
            "dtype": str(local.dtype).removeprefix("torch."),
            "elements": int(local.numel()),
            "uninitialised": min(missing // max(local.element_size(), 1), int(local.numel())),
            "nan": nan,
            "origin": dict(self.origins[origin]) if origin is not None else None,
        }

    def _last_init(self, extents: list[tuple[Extent, str]]) -> dict[str, Any] | None:
        """The last write that landed in a parameter's memory before the first forward."""
        for where, op, site in reversed(self.writes):
            for parameter, name in extents:
                if overlaps(parameter, where):
                    return {"op": op, "site": site, "parameter": name}
        return None

    # -- after it: the first non-finite collective input, mapped to parameters ---------------------

    def _collective(self, message: dict[str, Any], inputs: list[torch.Tensor]) -> None:
        self.collectives_checked += 1
        bad = [position for position, tensor in enumerate(inputs) if _nonfinite(tensor)]
        if not bad and self.collectives_checked < COLLECTIVES_CHECKED_MAX:
            return
        self.channel.call_observers.remove(self._collective)
        for restore in self._restore[1:]:
            restore()
        if not bad:
            return
        try:
            segments = self._segments(inputs[bad[0]])
        except Exception as error:  # never the script's failure
            segments = {"how": "", "segments": [], "broken": f"{type(error).__name__}: {error}"}
        mapping = {"op": message.get("op"), "group": message.get("group"), "seq": message.get("seq")}
        mapping.update(tensor=bad[0], shape=list(inputs[bad[0]].shape), **segments)
        self.channel.post({"kind": "probe", "step": self.step, "collective": mapping})

    def _segments(self, flat: torch.Tensor) -> dict[str, Any]:
        if self.fsdp_params is not None:
            mapped = _fsdp_segments(flat, self.fsdp_params, self.fqn)
            if mapped is not None:
                return {"how": "fsdp2", "segments": mapped}
        where = extent(flat)
        segments = []
        for name, parameter in self.parameters():
            if overlaps(where, extent(parameter)):
                count = _nonfinite(getattr(parameter, "_local_tensor", parameter).detach())
                segments.append({"name": name, "start": 0, "elements": parameter.numel(), "nonfinite": count})
        return {"how": "memory" if segments else "", "segments": segments[:SEGMENTS_MAX]}


def _nonfinite(tensor: torch.Tensor) -> int:
    data = getattr(tensor, "_local_tensor", tensor).detach()
    if not data.is_floating_point() or data.numel() == 0:
        return 0
    return int((~torch.isfinite(data)).sum())


def _fsdp_segments(
    flat: torch.Tensor, fsdp_params: Any, fqn: Callable[[torch.nn.Module, str], str]
) -> list[dict[str, Any]] | None:
    """FSDP2's flat all_gather input as its parameters' padded shards, in order (None: another layout)."""
    sizes = [int(param.padded_sharded_param_size.numel()) for param in fsdp_params]
    if sum(sizes) != flat.numel():
        return None
    data = flat.detach().reshape(-1)
    segments = []
    offset = 0
    for param, padded in zip(fsdp_params, sizes, strict=True):
        valid = min(int(param.sharded_size.numel()), padded)
        info = param._module_info
        segments.append(
            {
                "name": fqn(info.module, info.param_name),
                "start": offset,
                "elements": valid,
                "padding": padded - valid,
                "nonfinite": _nonfinite(data[offset : offset + valid]),
            }
        )
        offset += padded
    return segments[:SEGMENTS_MAX]
