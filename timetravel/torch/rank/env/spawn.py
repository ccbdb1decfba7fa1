"""``timetravel python SCRIPT``: a script that launches its own ranks with ``torch.multiprocessing``.

The PyTorch DDP tutorial's non-torchrun scripts end in ``mp.spawn(main, args=(world_size, …),
nprocs=world_size)``. Under ``timetravel python`` every simulated rank runs the script from its top, as
``python SCRIPT`` would, and its call to ``torch.multiprocessing.spawn`` (or ``start_processes``) runs
``fn(i, *args)`` in this process, ``i`` being the rank's local index: each spawned process is a
simulated rank. ``nprocs`` must be the ranks per host the run was given (``--nproc-per-node``, which
``torch.cuda.device_count()`` also reports); anything else is refused with a line saying so.

What differs from a real parent process: the code before and after the spawn runs once per rank, not
once (it is usually argument parsing and ``device_count()``). With ``join=False`` the call returns a
context whose ``join()`` says the process has ended, since its function already ran.
"""

from __future__ import annotations

from typing import Any

from timetravel.torch.rank.env.patching import Installation, Patches


class SpawnedContext:
    """What ``spawn(..., join=False)`` returns: the function already ran in this rank."""

    def __init__(self, local_rank: int) -> None:
        self.local_rank = local_rank

    def join(self, timeout: float | None = None, grace_period: float | None = None) -> bool:
        return True

    def pids(self) -> list[int]:
        import os

        return [os.getpid()]


def install_spawn(local_rank: int, local_world_size: int) -> Installation:
    """Make ``torch.multiprocessing.spawn``/``start_processes`` run their function as this rank."""
    import torch.multiprocessing
    import torch.multiprocessing.spawn as spawn_module

    def start_processes(
        fn: Any,
        args: tuple[Any, ...] = (),
        nprocs: int = 1,
        join: bool = True,
        daemon: bool = False,
        start_method: str = "spawn",
    ) -> SpawnedContext | None:
        if nprocs != local_world_size:
            raise RuntimeError(
                f"the script spawns {nprocs} processes, and timetravel python runs {local_world_size} "
                f"ranks per host: run it with --nproc-per-node {nprocs}"
            )
        fn(local_rank, *args)
        return None if join else SpawnedContext(local_rank)

    patches = Patches()
    for owner in (torch.multiprocessing, spawn_module):
        patches.replace(owner, "spawn", start_processes)  # the same parameters
        patches.replace(owner, "start_processes", start_processes)
    patches.rebind_aliases(skip_prefixes=("timetravel.",))
    return Installation("spawn", patches)
