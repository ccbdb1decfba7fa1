"""``install_all``: the whole rank environment, installed in the order its parts depend on.

1. torch's process settings: one intra-op thread (a rank's floats must not depend on how many
   cores the host has or how busy they are) and deterministic algorithms (``warn_only``: an op with
   no deterministic CPU kernel warns rather than stops the script), which also makes
   ``torch.empty`` memory NaN instead of whatever the allocator left there;
2. time — first, so that everything installed later already reads logical time;
3. entropy — seeds the default generators, which the CUDA generators' initial seed is taken from;
4. the logical pid; 5. CUDA on CPU (unless ``cuda`` is off); 6. DataLoader workers; 7. torch.compile;
   7b. under ``timetravel python``, torch.multiprocessing.spawn as this rank; 8. metrics, when a sink
   is given; 9. the file watch, when a working directory and a warning sink are given (writes outside
   it reported); 10. the `flops` compute model's counting mode, when a work meter is given (last: it
   sees the script only).

:meth:`RankEnvironment.uninstall` takes them back in reverse order (tests; a rank never does).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from timetravel.torch.metrics import Sink
from timetravel.torch.rank.env.clock import RankClock
from timetravel.torch.rank.env.cuda import install_cuda
from timetravel.torch.rank.env.cuda_api import DeviceSpec
from timetravel.torch.rank.env.entropy import install_entropy
from timetravel.torch.rank.env.files import install_file_watch
from timetravel.torch.rank.env.identity import install_identity
from timetravel.torch.rank.env.loading import install_compile, install_dataloader
from timetravel.torch.rank.env.metrics_capture import install_metrics
from timetravel.torch.rank.env.patching import Installation, Patches, one_alias_scan
from timetravel.torch.rank.env.spawn import install_spawn
from timetravel.torch.rank.env.virtual_time import install_time
from timetravel.torch.rank.env.work_model import WorkMeter, install_work_model

INTRA_OP_THREADS = 1


@dataclass
class RankEnvironment:
    """What :func:`install_all` installed, newest last."""

    clock: RankClock
    installations: list[Installation] = field(default_factory=list)

    def get(self, name: str) -> Installation:
        for installation in self.installations:
            if installation.name == name:
                return installation
        raise KeyError(name)

    def uninstall(self) -> None:
        while self.installations:
            self.installations.pop().uninstall()

    def __enter__(self) -> RankEnvironment:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.uninstall()


PRELOADED_MODULES = (
    "numpy",
    "torch",
    "torch.cuda",
    "torch.cuda.nvtx",
    "torch.fft",
    "torch.nn.parallel",
    "torch.utils.data",
    "torch.distributed.device_mesh",
    "torch._dynamo",  # torch.use_deterministic_algorithms imports it on first call: ~2 s
)


def preload(*, freeze: bool = True) -> None:
    """Import what :func:`install_all` needs, without installing anything: for the zygote.

    A zygote that calls this before forking pays the imports once (the first
    ``use_deterministic_algorithms`` call alone imports Dynamo, about 2 s). With ``freeze`` it
    then collects and freezes the heap (``gc.freeze()``): the garbage collector stops walking
    torch's millions of start-up objects, which made ``install_all`` cost 264–273 ms in a rank
    instead of 62–73 ms (measured on the shared 2-core machine), and forked ranks stop dirtying
    the copy-on-write pages those objects live on.
    """
    import gc
    import importlib

    for name in PRELOADED_MODULES:
        importlib.import_module(name)
    import torch.jit._builtins

    torch.jit._builtins._get_builtin_table()
    if freeze:
        gc.collect()
        gc.freeze()


def install_torch_settings(*, threads: int = INTRA_OP_THREADS, deterministic: bool = True) -> Installation:
    """One intra-op thread and deterministic algorithms (see the module docstring)."""
    import torch

    patches = Patches()
    previous_threads = torch.get_num_threads()
    previous_deterministic = torch.are_deterministic_algorithms_enabled()
    previous_warn_only = torch.is_deterministic_algorithms_warn_only_enabled()

    def restore() -> None:
        torch.set_num_threads(previous_threads)
        torch.use_deterministic_algorithms(previous_deterministic, warn_only=previous_warn_only)

    patches.on_undo(restore)
    torch.set_num_threads(threads)
    if deterministic:
        torch.use_deterministic_algorithms(True, warn_only=True)
    return Installation("torch_settings", patches)


def install_all(
    clock: RankClock,
    *,
    seed_bytes: bytes,
    rank: int,
    local_rank: int,
    local_world_size: int,
    metrics_sink: Sink | None = None,
    compile_mode: str = "eager",
    cuda: bool = True,
    spawn_inline: bool = False,
    device_mapping: str = "patch",
    device_spec: DeviceSpec | None = None,
    time_zone: str | None = "UTC",
    deterministic_algorithms: bool = True,
    working_directory: str | None = None,
    warn: Callable[[str, str], None] | None = None,
    work_meter: WorkMeter | None = None,
    restarts: int = 0,
) -> RankEnvironment:
    """Install the whole rank environment for rank ``rank`` (``local_rank`` of ``local_world_size``;
    ``restarts``: its incarnation, which its logical pid names).
    Without ``cuda`` torch.cuda is left as torch has it (a CPU-only host: no device), so the script
    takes the code path real torchrun takes on this machine. With ``spawn_inline``
    torch.multiprocessing.spawn runs its function as this rank (``timetravel python``: env/spawn.py)."""
    environment = RankEnvironment(clock)
    steps: list[Any] = [
        lambda: install_torch_settings(deterministic=deterministic_algorithms),
        lambda: install_time(clock, time_zone=time_zone),
        lambda: install_entropy(seed_bytes, rank=rank),
        lambda: install_identity(rank, restarts),
    ]
    if cuda:
        steps.append(
            lambda: install_cuda(
                local_rank, local_world_size, clock, spec=device_spec, device_mapping=device_mapping
            )
        )
    steps += [install_dataloader, lambda: install_compile(compile_mode)]
    if spawn_inline:
        steps.append(lambda: install_spawn(local_rank, local_world_size))
    if metrics_sink is not None:
        steps.append(lambda: install_metrics(metrics_sink))
    if working_directory is not None and warn is not None:
        directory, sink = working_directory, warn
        steps.append(lambda: install_file_watch(directory, sink))
    if work_meter is not None:
        meter = work_meter
        steps.append(lambda: install_work_model(meter))
    try:
        with one_alias_scan():
            for step in steps:
                environment.installations.append(step())
    except BaseException:
        environment.uninstall()
        raise
    return environment
