"""The ``torch.cuda`` API of a simulated GPU rank, served on CPU (see :mod:`.cuda` for the whole story).

A :class:`SimulatedCuda` holds what a CUDA runtime would: the local device count, the current
device, each device's current stream, the seeds and RNG states of the per-device generators.
Its methods replace the ``torch.cuda`` functions of the same names. Work is synchronous on CPU,
so every stream is always idle: ``synchronize``, ``query`` and ``wait_*`` return at once, and an
:class:`Event` records the rank's logical time, so ``start.elapsed_time(end)`` is the logical time
charged between the two records, in milliseconds as CUDA reports it.
"""

from __future__ import annotations

import contextlib
import itertools
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from timetravel.torch.rank.env.clock import RankClock
from timetravel.torch.rank.env.cuda_placements import Placements
from timetravel.torch.rank.errors import the_scripts

NS_PER_MS = 1_000_000
GIB = 1 << 30


class Unsupported(RuntimeError):
    """A CUDA feature the simulator cannot serve on CPU; the message is ``unsupported: <name> needs a real GPU``."""

    failure_kind = "unsupported"

    def __init__(self, name: str) -> None:
        self.feature = name
        super().__init__(f"unsupported: {name} needs a real GPU")


@dataclass(frozen=True)
class DeviceSpec:
    """What ``get_device_properties`` reports for every simulated device (an A100-like part by default)."""

    name: str = "timetravel simulated GPU (CPU)"
    major: int = 8
    minor: int = 0
    total_memory: int = 80 * GIB
    multi_processor_count: int = 108
    warp_size: int = 32
    L2_cache_size: int = 40 * (1 << 20)


class DeviceProperties:
    """The fields scripts read from ``torch.cuda.get_device_properties(i)``, with torch's repr."""

    def __init__(self, spec: DeviceSpec, index: int) -> None:
        self.name = spec.name
        self.major = spec.major
        self.minor = spec.minor
        self.total_memory = spec.total_memory
        self.multi_processor_count = spec.multi_processor_count
        self.warp_size = spec.warp_size
        self.L2_cache_size = spec.L2_cache_size
        self.is_integrated = 0
        self.is_multi_gpu_board = 0
        self.max_threads_per_multi_processor = 2048
        self.regs_per_multiprocessor = 65536
        self.gcnArchName = ""
        self.uuid = f"00000000-0000-0000-0000-{index:012x}"
        self.pci_bus_id = index
        self.pci_device_id = 0
        self.pci_domain_id = 0

    def __repr__(self) -> str:
        return (
            f"_CudaDeviceProperties(name='{self.name}', major={self.major}, minor={self.minor}, "
            f"total_memory={self.total_memory // (1 << 20)}MB, multi_processor_count={self.multi_processor_count}, "
            f"uuid={self.uuid}, L2_cache_size={self.L2_cache_size // (1 << 20)}MB)"
        )


class Stream:
    """A CUDA stream on a simulated device: always idle (CPU work is done when the call returns)."""

    _ids = itertools.count(1)

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any) -> None:
        cuda = _installed()
        self.device_index = cuda.index(device)
        self.priority = priority
        self.stream_id = next(Stream._ids)

    @property
    def device(self) -> Any:
        import torch

        return torch.device("cuda", self.device_index)

    @property
    def cuda_stream(self) -> int:
        return self.stream_id

    def query(self) -> bool:
        return True

    def is_capturing(self) -> bool:
        return False  # no CUDA graph is ever captured (torch.optim asks before every Adam step)

    def synchronize(self) -> None:
        return None

    def wait_event(self, event: Event) -> None:
        return None

    def wait_stream(self, stream: Stream) -> None:
        return None

    def record_event(self, event: Event | None = None) -> Event:
        event = Event() if event is None else event
        event.record(self)
        return event

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Stream) and other.stream_id == self.stream_id

    def __hash__(self) -> int:
        return hash(("cuda-stream", self.stream_id))

    def __repr__(self) -> str:
        return f"<torch.cuda.Stream device=cuda:{self.device_index} cuda_stream={self.stream_id:#x}>"


class Event:
    """A CUDA event: ``record`` stamps the rank's logical time; ``elapsed_time`` is in ms, as CUDA's."""

    def __init__(
        self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> None:
        if interprocess:
            raise Unsupported("torch.cuda.Event(interprocess=True)")
        self.enable_timing = enable_timing
        self.blocking = blocking
        self.recorded_ns: int | None = None

    def record(self, stream: Stream | None = None) -> None:
        self.recorded_ns = _installed().clock.now_ns()

    def wait(self, stream: Stream | None = None) -> None:
        return None

    def query(self) -> bool:
        return True

    def synchronize(self) -> None:
        return None

    def elapsed_time(self, end_event: Event) -> float:
        if not (self.enable_timing and end_event.enable_timing):
            raise the_scripts(RuntimeError("Both events must be created with argument 'enable_timing=True'."))
        if self.recorded_ns is None or end_event.recorded_ns is None:
            raise the_scripts(RuntimeError("Both events must be recorded before calculating elapsed time."))
        return (end_event.recorded_ns - self.recorded_ns) / NS_PER_MS

    def ipc_handle(self) -> Any:
        raise Unsupported("torch.cuda.Event.ipc_handle")

    def __repr__(self) -> str:
        return f"<torch.cuda.Event recorded_ns={self.recorded_ns}>"


class SimulatedCuda:
    """The simulated CUDA runtime of one rank: ``local_world_size`` devices, all served by the CPU."""

    def __init__(self, local_rank: int, local_world_size: int, clock: RankClock, spec: DeviceSpec) -> None:
        if local_world_size < 1:
            raise ValueError(f"local_world_size must be >= 1, got {local_world_size}")
        if not 0 <= local_rank < local_world_size:
            raise ValueError(f"local_rank {local_rank} is outside 0..{local_world_size - 1}")
        self.local_rank = local_rank
        self.local_world_size = local_world_size
        self.clock = clock
        self.spec = spec
        self.current_index = (
            0  # CUDA's current device is 0 until the script calls set_device, as on a GPU node
        )
        self.default_streams = [Stream.__new__(Stream) for _ in range(local_world_size)]
        for index, stream in enumerate(self.default_streams):
            stream.device_index, stream.priority, stream.stream_id = index, 0, 0
        self.current_streams = list(self.default_streams)
        self.seeds = [0] * local_world_size
        self.rng_states: list[Any] = [None] * local_world_size
        self.placements = Placements()  # what the script put on a CUDA device (cuda_placements.py)

    # -- devices ---------------------------------------------------------------------------

    def index(self, device: Any = None, *, optional: bool = True) -> int:
        """The device index that ``device`` (None, int, "cuda:1", torch.device) names; range-checked."""
        if device is None:
            return self.current_index
        if isinstance(device, int) and not isinstance(device, bool):
            index = device
        else:
            text = str(device)
            kind, _, number = text.partition(":")
            if kind != "cuda":
                raise the_scripts(ValueError(f"Expected a cuda device, but got: {text}"))
            index = int(number) if number else self.current_index
        if index < 0 and optional:
            return self.current_index
        if not 0 <= index < self.local_world_size:
            raise the_scripts(
                RuntimeError(
                    f"CUDA error: invalid device ordinal (device {index}; this rank sees "
                    f"{self.local_world_size} simulated GPUs)"
                )
            )
        return index

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        return self.local_world_size

    def current_device(self) -> int:
        return self.current_index

    def set_device(self, device: Any) -> None:
        if isinstance(device, int) and device < 0:
            return  # torch ignores a negative index
        self.current_index = self.index(device)

    def synchronize(self, device: Any = None) -> None:
        self.index(device)

    def get_device_name(self, device: Any = None) -> str:
        self.index(device)
        return self.spec.name

    def get_device_capability(self, device: Any = None) -> tuple[int, int]:
        self.index(device)
        return (self.spec.major, self.spec.minor)

    def get_device_properties(self, device: Any = None) -> DeviceProperties:
        return DeviceProperties(self.spec, self.index(device))

    def get_arch_list(self) -> list[str]:
        return [f"sm_{self.spec.major}{self.spec.minor}"]

    def mem_get_info(self, device: Any = None) -> tuple[int, int]:
        self.index(device)
        return (self.spec.total_memory, self.spec.total_memory)

    # -- streams ---------------------------------------------------------------------------

    def current_stream(self, device: Any = None) -> Stream:
        return self.current_streams[self.index(device)]

    def default_stream(self, device: Any = None) -> Stream:
        return self.default_streams[self.index(device)]

    def set_stream(self, stream: Stream) -> None:
        if stream is not None:
            self.current_streams[stream.device_index] = stream

    @contextlib.contextmanager
    def stream(self, stream: Stream | None) -> Iterator[Stream | None]:
        """``with torch.cuda.stream(s):`` makes ``s`` its device's current stream for the block."""
        if stream is None:
            yield None
            return
        previous = self.current_streams[stream.device_index]
        self.current_streams[stream.device_index] = stream
        try:
            yield stream
        finally:
            self.current_streams[stream.device_index] = previous

    # -- random number generators ------------------------------------------------------------
    # Tensors "on cuda" are CPU tensors, so their random draws come from the rank's CPU generator;
    # the per-device generators keep their seed and state for scripts that save and restore them.

    def manual_seed(self, seed: int) -> None:
        self.seeds[self.current_index] = int(seed) % (1 << 64)
        self.rng_states[self.current_index] = None

    def manual_seed_all(self, seed: int) -> None:
        self.seeds = [int(seed) % (1 << 64)] * self.local_world_size
        self.rng_states = [None] * self.local_world_size

    def initial_seed(self) -> int:
        return self.seeds[self.current_index]

    def get_rng_state(self, device: Any = "cuda") -> Any:
        import torch

        index = self.index(device)
        state = self.rng_states[index]
        if state is None:
            state = torch.tensor(list(self.seeds[index].to_bytes(8, "little")), dtype=torch.uint8)
        return state.clone()

    def set_rng_state(self, new_state: Any, device: Any = "cuda") -> None:
        self.rng_states[self.index(device)] = new_state.clone()

    def get_rng_state_all(self) -> list[Any]:
        return [self.get_rng_state(index) for index in range(self.local_world_size)]

    def set_rng_state_all(self, new_states: Any) -> None:
        for index, state in enumerate(new_states):
            self.set_rng_state(state, index)


def memory_stats(device: Any = None, **kwargs: Any) -> dict[str, int]:
    """Every counter of ``torch.cuda.memory_stats`` is 0 (a dict that answers 0 for any key)."""
    _installed().index(device)
    return defaultdict(int)


def zero(*args: Any, **kwargs: Any) -> int:
    """The memory counters (``memory_allocated``, ``max_memory_reserved``, ...): no GPU memory is used."""
    return 0


def nothing(*args: Any, **kwargs: Any) -> None:
    """``empty_cache``, ``reset_peak_memory_stats``, ``nvtx.range_push`` and other housekeeping."""
    return None


ZERO_FUNCTIONS = (
    "memory_allocated",
    "max_memory_allocated",
    "memory_reserved",
    "max_memory_reserved",
    "memory_cached",
    "max_memory_cached",
    "utilization",
    "memory_usage",
    "temperature",
    "power_draw",
    "clock_rate",
    "device_memory_used",
)
NOTHING_FUNCTIONS = (
    "empty_cache",
    "ipc_collect",
    "reset_peak_memory_stats",
    "reset_max_memory_allocated",
    "reset_max_memory_cached",
    "reset_accumulated_memory_stats",
    "set_per_process_memory_fraction",
    "init",
    "_lazy_init",
    "set_sync_debug_mode",
)
REFUSED_CUDA_NAMES = (
    "CUDAGraph",
    "graph",
    "make_graphed_callables",
    "graph_pool_handle",
    "ExternalStream",
    "get_stream_from_external",
    "MemPool",
    "use_mem_pool",
    "CUDAPluggableAllocator",
    "change_current_allocator",
    "caching_allocator_alloc",
    "GreenContext",
)
"""torch.cuda names that cannot be served on CPU: each call raises ``unsupported: torch.cuda.<name> ...``."""

_INSTANCE: list[SimulatedCuda] = []


def _installed() -> SimulatedCuda:
    if not _INSTANCE:
        raise RuntimeError("the simulated CUDA runtime is not installed in this process")
    return _INSTANCE[-1]


def activate(cuda: SimulatedCuda) -> None:
    _INSTANCE.append(cuda)


def deactivate(cuda: SimulatedCuda) -> None:
    _INSTANCE.remove(cuda)


def refused(name: str, is_class: bool = False, owner: str = "torch.cuda") -> Any:
    """A stand-in for ``<owner>.<name>`` that raises :class:`Unsupported` when called or built: a class
    for a class (so ``torch.cuda.CUDAGraph | None`` in an annotation still works), else a function."""
    if is_class:

        class Refused:
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                raise Unsupported(f"{owner}.{name}")

        Refused.__name__ = Refused.__qualname__ = name
        return Refused

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise Unsupported(f"{owner}.{name}")

    refuse.__name__ = name
    return refuse
