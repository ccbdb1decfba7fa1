# mypy: disable-error-code="override, assignment"
# (torch's stubs give ProcessGroup's pybind methods overloads a Python backend cannot mirror one by one)
"""The ``timetravel`` torch.distributed backend (rank side): every collective is a call to the World.

:class:`SimulatedProcessGroup` is a Python subclass of ``dist.ProcessGroup``; torch uses such a group
directly, DDP's C++ reducer included. Each method flattens torch's signature into one of the few
shapes of :mod:`timetravel.torch.world.collectives`, posts the inputs to the coordinator and returns at once
with a :class:`SimulatedWork`; ``wait()`` (or ``get_future()``, which DDP calls) asks the coordinator
for the result, which arrives with the logical time the collective completed on this rank, and copies
it into the output tensors in place. Tensors cross as raw bytes (:mod:`timetravel.torch.protocol.wire`).
"""

from __future__ import annotations

import datetime
import sys
import threading
from collections.abc import Callable
from typing import Any, NoReturn

import numpy as np
import torch
import torch.distributed as dist
from torch.futures import Future

from timetravel.torch.protocol.arrays import DTYPES
from timetravel.torch.rank.channel import Channel
from timetravel.torch.rank.errors import the_scripts

BACKEND_NAME = "timetravel"
_REDUCE_OP_NAMES = ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM")
_TORCH_DTYPE_NAMES = {getattr(torch, name): name for name in DTYPES}
_channel: Channel | None = None


class UnsupportedCollective(RuntimeError):
    """An op the simulator does not implement: a clear failure, never a silent wrong answer."""

    failure_kind = "unsupported"


class Maker:
    """The thread that made a process group (or the store): the only one that may call through it.

    Collectives from several threads of one rank arrive in the order the OS runs the threads, which
    no seed decides, so the same seed would give another hash chain on every run (issue 32). The
    first call from any other thread ends the rank with an ``unsupported`` failure that names the
    maker; which other thread came first is the OS's choice, so it is named only in the rank's
    output, and the failure carries no traceback: it is the same whichever thread it was."""

    def __init__(self) -> None:
        thread = threading.current_thread()
        self.ident = thread.ident
        self.name = thread.name

    def check(self, what: str) -> None:
        """Refuse ``what`` (``all_reduce``, ``store.get``) from any thread but the maker."""
        if threading.get_ident() != self.ident:
            _refuse_other_thread(what, self.name)


def _refuse_other_thread(what: str, maker: str) -> NoReturn:
    caller = threading.current_thread().name
    print(
        f"timetravel: thread {caller!r} called {what} through a process group (or store) that thread "
        f"{maker!r} made",
        file=sys.stderr,
    )
    error = (
        f"a collective or store call from a thread other than {maker!r}, which made its process group: "
        "a rank's calls to the World must come from one thread (the OS orders threads; no seed could "
        "repeat the run)"
    )
    channel().abort(
        {
            "kind": "exit",
            "code": 1,
            "error": f"{UnsupportedCollective.__name__}: {error}",
            "error_kind": "unsupported",
            "traceback": "",
            "where": "",
        }
    )


def bind(channel: Channel) -> None:
    """Attach this rank's channel (called once, before the script runs)."""
    global _channel
    _channel = channel


def unbind() -> None:
    """Forget the channel (in a process forked from a rank: only the rank itself speaks to the World)."""
    global _channel
    _channel = None


def channel() -> Channel:
    if _channel is None:
        raise RuntimeError("the timetravel backend is used outside a simulated rank")
    return _channel


def tensor_to_wire(tensor: torch.Tensor) -> dict[str, Any]:
    """The wire form of a tensor: its data a numpy view of the tensor's own memory (no copy unless it
    is not contiguous), which the wire sends as a frame or inline (timetravel/torch/protocol/wire.py).

    The view is read while the message is sent, synchronously: the bytes that leave are the tensor's
    at the moment of the call. A caller that sends later must pass a tensor of its own (a clone)."""
    tensor = tensor.detach()
    if tensor.device.type != "cpu":
        tensor = tensor.cpu()
    name = _TORCH_DTYPE_NAMES.get(tensor.dtype)
    if name is None:
        raise UnsupportedCollective(f"unsupported tensor dtype {tensor.dtype} in a collective")
    tensor = tensor.contiguous()
    if name == "bfloat16":
        data = tensor.view(torch.int16).numpy()
    elif name == "bool":
        data = tensor.to(torch.uint8).numpy()
    else:
        data = tensor.numpy()
    return {"dtype": name, "shape": list(tensor.shape), "data": data}


def wire_to_tensor(wire: dict[str, Any]) -> torch.Tensor:
    """A received tensor: over the message's own buffer when its bytes came as a frame (a fresh buffer
    per message, owned by nobody else), a copy when they came inline (``bytes`` are read-only)."""
    name = wire["dtype"]
    data = wire["data"]
    numpy_dtype = np.dtype(np.int16) if name == "bfloat16" else DTYPES[name]
    if isinstance(data, np.ndarray) and data.flags.writeable:
        array = data.view(numpy_dtype)
    else:
        array = np.frombuffer(data, dtype=numpy_dtype).copy()
    tensor = torch.from_numpy(array)
    if name == "bfloat16":
        tensor = tensor.view(torch.bfloat16)
    return tensor.reshape(wire["shape"])


class SimulatedWork(dist.Work):
    """A collective in flight: its result is fetched from the World on the first wait.

    The wait carries the hang timeout the script gave (``work.wait(timeout)``, else its group's
    ``timeout=``); without one the World applies the run's ``hang_timeout``."""

    def __init__(
        self,
        work_id: int,
        deliver: Callable[[list[torch.Tensor]], list[torch.Tensor]],
        timeout_ns: int | None = None,
        message: dict[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.work_id = work_id
        self._deliver = deliver
        self._outputs: list[torch.Tensor] | None = None
        self._timeout_ns = timeout_ns
        self._message = message or {}

    def wait(self, timeout: Any = None) -> bool:
        if self._outputs is None:
            rank_channel = channel()
            request: dict[str, Any] = {"kind": "wait", "works": [self.work_id]}
            timeout_ns = _nanoseconds(timeout) or self._timeout_ns  # torch's timedelta(0): the group's
            if timeout_ns:
                request["timeout_ns"] = timeout_ns
            reply = rank_channel.call(request)
            received = [wire_to_tensor(wire) for wire in reply["results"][str(self.work_id)]]
            self._outputs = self._deliver(received)
            for observe in rank_channel.result_observers:
                observe(self._message, self._outputs)
        return True

    def is_completed(self) -> bool:
        return self._outputs is not None

    def is_success(self) -> bool:
        return self._outputs is not None

    def result(self) -> list[torch.Tensor]:
        self.wait()
        return list(self._outputs or [])

    def get_future(self) -> Future:
        self.wait()
        future: Future = Future()
        future.set_result(list(self._outputs or []))
        return future

    def synchronize(self) -> None:
        self.wait()


def _nanoseconds(timeout: Any) -> int | None:
    """A torch timeout (a timedelta) in integer nanoseconds; None for none."""
    if timeout is None:
        return None
    return int(timeout // datetime.timedelta(microseconds=1)) * 1000


def _copy_into(targets: list[torch.Tensor]) -> Callable[[list[torch.Tensor]], list[torch.Tensor]]:
    def deliver(received: list[torch.Tensor]) -> list[torch.Tensor]:
        for target, value in zip(targets, received, strict=True):
            with torch.no_grad():
                target.copy_(value.reshape(target.shape))
        return targets

    return deliver


def _reduce_op(opts: Any) -> str:
    op = getattr(opts, "reduceOp", None)
    for name in _REDUCE_OP_NAMES:
        if op == getattr(dist.ReduceOp, name):
            if name == "PREMUL_SUM":
                raise UnsupportedCollective("unsupported reduce op PREMUL_SUM")
            return name.lower()
    raise UnsupportedCollective(f"unsupported reduce op {op}")


class SimulatedProcessGroup(dist.ProcessGroup):
    """One process group of one rank; see the module docstring."""

    def __init__(self, rank: int, size: int, timeout: Any = None) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]
        self._group_rank = rank
        self._size = size
        self._timeout_ns = _nanoseconds(timeout)
        self._members: list[int] | None = None
        self._key: str | None = None
        self._sequence = 0
        self._p2p_counts: dict[str, int] = {}
        self._group_name = ""
        self._maker = Maker()

    # -- identity ------------------------------------------------------------------------------

    def size(self) -> int:
        return self._size

    def getBackendName(self) -> str:
        return BACKEND_NAME

    def _set_group_name(self, name: str) -> None:
        # ProcessGroup.group_name asks a registered C++ backend; a Python group is its own backend,
        # so it keeps the name itself (DeviceMesh, FSDP2 and functional collectives look it up)
        self._group_name = name
        super()._set_group_name(name)  # type: ignore[arg-type]

    @property
    def group_name(self) -> str:
        return self._group_name

    def __repr__(self) -> str:
        return f"SimulatedProcessGroup(rank={self._group_rank}, size={self._size})"

    def _identity(self) -> tuple[str, list[int]]:
        if self._key is None:
            world = dist.distributed_c10d._world
            self._key = str(world.pg_names.get(self, "0"))
            try:
                self._members = list(dist.get_process_group_ranks(self))
            except (RuntimeError, ValueError, KeyError):
                self._members = list(range(self._size))
        assert self._members is not None
        return self._key, self._members

    # -- the one path every op takes -------------------------------------------------------------

    def _post(
        self,
        op: str,
        inputs: list[torch.Tensor],
        deliver: Callable[[list[torch.Tensor]], list[torch.Tensor]],
        **opts: Any,
    ) -> SimulatedWork:
        key, members = self._identity()
        self._sequence += 1
        message = {"op": op, "group": key, "members": members, "seq": self._sequence, "opts": opts}
        return self._call(message, inputs, deliver)

    def _call(
        self,
        message: dict[str, Any],
        inputs: list[torch.Tensor],
        deliver: Callable[[list[torch.Tensor]], list[torch.Tensor]],
    ) -> SimulatedWork:
        """Post one call to the World (its inputs as raw bytes) and return its work at once."""
        self._maker.check(str(message["op"]))
        rank_channel = channel()
        work_id = rank_channel.next_work_id()
        for observe in list(rank_channel.call_observers):
            observe(message, inputs)
        message.update(
            kind="call",
            id=work_id,
            inputs=[tensor_to_wire(tensor) for tensor in inputs],
            timeout_ns=self._timeout_ns,
        )
        rank_channel.post(message)
        described: dict[str, Any] = {key: message[key] for key in ("op", "group", "seq") if key in message}
        return SimulatedWork(work_id, deliver, self._timeout_ns, described)

    # -- collectives -----------------------------------------------------------------------------

    def allreduce(self, tensors: list[torch.Tensor], opts: Any = None) -> SimulatedWork:
        return self._post("all_reduce", tensors, _copy_into(tensors), reduce_op=_reduce_op(opts))

    def allreduce_coalesced(self, tensors: list[torch.Tensor], opts: Any = None) -> SimulatedWork:
        return self.allreduce(tensors, opts)

    def broadcast(self, tensors: list[torch.Tensor], opts: Any = None) -> SimulatedWork:
        return self._post("broadcast", tensors, _copy_into(tensors), root=int(opts.rootRank))

    def reduce(self, tensors: list[torch.Tensor], opts: Any = None) -> SimulatedWork:
        root = int(opts.rootRank)
        targets = tensors if self._group_rank == root else []
        return self._post("reduce", tensors, _copy_into(targets), reduce_op=_reduce_op(opts), root=root)

    def allgather(
        self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> SimulatedWork:
        if len(inputs) != 1 or len(output_lists) != 1:
            return self.allgather_coalesced(output_lists, inputs, opts)
        return self._post("all_gather", inputs, _copy_into(list(output_lists[0])))

    def allgather_coalesced(
        self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> SimulatedWork:
        # all_gather of k tensors returns, per source rank, its k tensors in order
        targets = [
            output_lists[position][source] for source in range(self._size) for position in range(len(inputs))
        ]
        return self._post("all_gather", inputs, _copy_into(targets))

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> SimulatedWork:
        if output.numel() != input.numel() * self._size:
            raise the_scripts(
                ValueError(
                    f"all_gather_into_tensor: output has {output.numel()} elements, expected {input.numel() * self._size}"
                )
            )
        return self._post("all_gather", [input], _copy_into(list(output.chunk(self._size))))

    _allgather_base = all_gather_single

    def all_gather_single_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> SimulatedWork:
        targets = [
            outputs[position].chunk(self._size)[source]
            for source in range(self._size)
            for position in range(len(inputs))
        ]
        return self._post("all_gather", inputs, _copy_into(targets))

    allgather_into_tensor_coalesced = all_gather_single_coalesced

    def reduce_scatter(
        self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]], opts: Any = None
    ) -> SimulatedWork:
        if len(outputs) != 1:
            raise UnsupportedCollective("unsupported op reduce_scatter with more than one output tensor")
        return self._post(
            "reduce_scatter", list(input_lists[0]), _copy_into(outputs), reduce_op=_reduce_op(opts)
        )

    def reduce_scatter_single(
        self, output: torch.Tensor, input: torch.Tensor, opts: Any = None
    ) -> SimulatedWork:
        if input.numel() != output.numel() * self._size:
            raise the_scripts(
                ValueError(
                    f"reduce_scatter_tensor: input has {input.numel()} elements, expected {output.numel() * self._size}"
                )
            )
        return self._post(
            "reduce_scatter", list(input.chunk(self._size)), _copy_into([output]), reduce_op=_reduce_op(opts)
        )

    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_single_coalesced(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> SimulatedWork:
        works = [
            self.reduce_scatter_single(output, input, opts)
            for output, input in zip(outputs, inputs, strict=True)
        ]
        for work in works[:-1]:
            work.wait()
        return works[-1]

    reduce_scatter_tensor_coalesced = reduce_scatter_single_coalesced

    def alltoall(
        self, outputs: list[torch.Tensor], inputs: list[torch.Tensor], opts: Any = None
    ) -> SimulatedWork:
        return self._post("all_to_all", inputs, _copy_into(outputs))

    def all_to_all_single(
        self,
        output: torch.Tensor,
        input: torch.Tensor,
        output_split_sizes: list[int] | None,
        input_split_sizes: list[int] | None,
        opts: Any = None,
    ) -> SimulatedWork:
        inputs = _split(input, input_split_sizes, self._size)
        outputs = _split(output, output_split_sizes, self._size)
        return self._post("all_to_all", inputs, _copy_into(outputs))

    alltoall_base = all_to_all_single

    def gather(
        self, output_lists: list[list[torch.Tensor]], inputs: list[torch.Tensor], opts: Any = None
    ) -> SimulatedWork:
        root = int(opts.rootRank)
        targets = list(output_lists[0]) if self._group_rank == root else []
        return self._post("gather", inputs, _copy_into(targets), root=root)

    def scatter(
        self, outputs: list[torch.Tensor], input_lists: list[list[torch.Tensor]], opts: Any = None
    ) -> SimulatedWork:
        root = int(opts.rootRank)
        inputs = list(input_lists[0]) if self._group_rank == root else []
        return self._post("scatter", inputs, _copy_into(outputs), root=root)

    def barrier(self, opts: Any = None) -> SimulatedWork:
        return self._post("barrier", [], _copy_into([]))

    def monitored_barrier(self, opts: Any = None, wait_all_ranks: bool = False) -> None:
        self.barrier().wait()

    # -- point to point --------------------------------------------------------------------------

    def send(self, tensors: list[torch.Tensor], dst: int, tag: int = 0) -> SimulatedWork:
        return self._post_p2p("send", tensors, dst, tag, _copy_into([]))

    def recv(self, tensors: list[torch.Tensor], src: int, tag: int = 0) -> SimulatedWork:
        return self._post_p2p("recv", [], src, tag, _copy_into(tensors), shapes=tensors)

    def recv_anysource(self, tensors: list[torch.Tensor], tag: int = 0) -> SimulatedWork:
        raise UnsupportedCollective("unsupported op recv_anysource (recv without src)")

    def _post_p2p(
        self,
        op: str,
        inputs: list[torch.Tensor],
        peer: int,
        tag: int,
        deliver: Callable[[list[torch.Tensor]], list[torch.Tensor]],
        shapes: list[torch.Tensor] | None = None,
    ) -> SimulatedWork:
        key, members = self._identity()
        me, other = members[self._group_rank], members[peer]
        source, destination = (me, other) if op == "send" else (other, me)
        pair = f"{key}:{source}>{destination}:{tag}"
        self._p2p_counts[pair] = self._p2p_counts.get(pair, 0) + 1
        message = {
            "op": op,
            "group": key,
            "members": members,
            "seq": self._p2p_counts[pair],
            "pair": pair,
            "peer": other,
            "expect": [[_TORCH_DTYPE_NAMES.get(t.dtype, str(t.dtype)), list(t.shape)] for t in shapes or []],
            "opts": {"tag": tag},
        }
        return self._call(message, inputs, deliver)


def _split(tensor: torch.Tensor, sizes: list[int] | None, parts: int) -> list[torch.Tensor]:
    if not sizes:
        return list(tensor.chunk(parts)) if tensor.numel() else [tensor] * parts
    return list(torch.split(tensor, list(sizes)))
