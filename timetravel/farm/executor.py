"""What every executor (local process pool, Dask) promises the sweep.

``run(jobs, stop)`` yields exactly one row per job it took from ``jobs``, in completion order,
and takes no new job once ``stop()`` is true (the jobs in flight still finish). A job whose
worker dies is run again, up to ``SEED_ATTEMPTS_MAX`` times, then yields a ``crash`` row; a job
past its hard deadline yields a ``timeout`` row. So nothing a worker does can lose a seed or
yield it twice; the parent commits what it is given. ``close()`` stops every worker (also after
Ctrl-C, when the jobs in flight are simply dropped: they were never committed, so a rerun runs
them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from timetravel.farm.job import SeedJob

SEED_ATTEMPTS_MAX = 3
"""Runs of one seed whose worker died before the seed is recorded as ``crash``."""
HARD_TIMEOUT_GRACE_S = 2.0
"""A seed past ``--seed-timeout`` stops itself at its next pause; this much later its worker is killed."""


class FarmWorkerError(RuntimeError):
    """A worker failed outside any seed (it cannot import timetravel, runs other code, ...)."""


@dataclass
class ExecutorStats:
    worker_deaths: int = 0
    retries: int = 0
    killed_for_timeout: int = 0


class Executor(Protocol):
    name: str
    workers: int
    stats: ExecutorStats

    def run(self, jobs: Iterator[SeedJob], stop: Callable[[], bool]) -> Iterator[dict[str, Any]]: ...

    def close(self) -> None: ...


def hard_deadline_s(seed_timeout_s: float | None) -> float | None:
    """Seconds after a seed starts when its worker is killed (None: never)."""
    if not seed_timeout_s:
        return None
    return seed_timeout_s + max(HARD_TIMEOUT_GRACE_S, seed_timeout_s / 2)
