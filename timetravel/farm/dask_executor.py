"""The Dask executor: the same ``run_seed`` on a ``dask.distributed`` cluster.

``--dask`` alone starts a LocalCluster on this machine (processes, one thread each: the kernel
is pure Python and holds the GIL); ``--dask tcp://host:8786`` connects to a running scheduler.
dask is the ``cluster`` extra and is imported here only, and only when this executor is built.

Dask already re-runs a task whose worker died and, after ``distributed.scheduler.allowed-failures``
deaths, fails it with ``KilledWorker``, which becomes a ``crash`` row. A stuck task cannot be
killed in its thread, so past its hard deadline the seed is recorded as ``timeout``, the future
is cancelled and the worker holding it is restarted by its nanny. At most two seeds per worker
thread are in flight, so the scheduler always has the next seed at hand and never holds the
whole sweep.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError
from typing import Any

from timetravel.farm.executor import SEED_ATTEMPTS_MAX, ExecutorStats, FarmWorkerError, hard_deadline_s
from timetravel.farm.job import SeedJob, crash_row, timeout_row
from timetravel.farm.worker import run_job, warm_worker

CONNECT_TIMEOUT_S = 30
POLL_INTERVAL_S = 0.25
IN_FLIGHT_PER_THREAD = 2
RESTART_TIMEOUT_S = 30


class DaskSetupError(RuntimeError):
    """dask is not installed, or the scheduler cannot be reached."""


def _past(job: SeedJob, seconds: float, deadlines: int) -> bool:
    limit = hard_deadline_s(job.seed_timeout_s)
    return limit is not None and seconds > deadlines * limit


def executing_task_keys(dask_worker: Any) -> list[Any]:
    """On a worker (``Client.run`` passes it): the keys of the tasks its threads execute now."""
    return [task.key for task in dask_worker.state.executing]


def _distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise DaskSetupError("--dask needs dask.distributed: pip install 'timetravel[cluster]'") from None
    return distributed


def dropped(future: Any) -> bool:
    """Whether a task came back with neither a result nor an error of its own: cancelled by the
    scheduler, or ``lost`` — its result was on a worker that died before it was fetched (seen on a
    loaded machine while another seed kept killing workers: the future's status was ``lost`` and its
    exception None, reported before as "failed: NoneType: None")."""
    if future.status in ("cancelled", "lost"):
        return True
    return bool(future.status != "finished" and future.exception() is None)


class DaskExecutor:
    """Seeds as Dask tasks (see the module docstring)."""

    name = "dask"

    def __init__(self, address: str | None = None, workers: int | None = None) -> None:
        distributed = _distributed()
        self.address = address
        self.cluster: Any = None
        self.stats = ExecutorStats()
        try:
            if address is None:
                from timetravel.farm.local_pool import default_workers

                self.cluster = distributed.LocalCluster(
                    n_workers=workers or default_workers(),
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=logging.ERROR,
                )
                self.client = distributed.Client(self.cluster)
            else:
                self.client = distributed.Client(address, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as error:
            self.close()
            raise DaskSetupError(f"cannot reach the Dask scheduler at {address}: {error}") from None
        self.workers = max(1, sum(self.client.nthreads().values()))
        self.warmed_for: SeedJob | None = None
        """The job whose code the workers imported (``_warm``), once the first is submitted."""
        self.cancelled_by_dask: dict[int, int] = {}
        """Seed -> times Dask cancelled its task without being asked (``_lost``)."""

    def run(self, jobs: Iterator[SeedJob], stop: Callable[[], bool]) -> Iterator[dict[str, Any]]:
        distributed = _distributed()
        in_flight: dict[Any, tuple[SeedJob, float]] = {}
        exhausted = False
        while True:
            while not exhausted and not stop() and len(in_flight) < IN_FLIGHT_PER_THREAD * self.workers:
                job = next(jobs, None)
                if job is None:
                    exhausted = True
                    break
                if self.warmed_for is None:
                    self._warm(job)
                future = self.client.submit(run_job, job, pure=False, retries=0)
                in_flight[future] = (job, time.monotonic())
            if not in_flight:
                return
            try:
                done, _ = distributed.wait(
                    list(in_flight), timeout=POLL_INTERVAL_S, return_when="FIRST_COMPLETED"
                )
            except TimeoutError:
                done = set()
            except CancelledError:  # distributed.wait raises for a cancelled future: handled below
                done = {future for future in in_flight if future.done()}
            for future in done:
                job, _submitted = in_flight.pop(future)
                if not dropped(future):
                    yield self._row(distributed, future, job)
                elif self._lost(job):
                    resubmitted = self.client.submit(run_job, job, pure=False, retries=0)
                    in_flight[resubmitted] = (job, time.monotonic())
                else:
                    yield crash_row(job, SEED_ATTEMPTS_MAX, f"Dask {future.status} the task")
            yield from self._expire(in_flight)

    def _warm(self, job: SeedJob) -> None:
        """Every worker imports the sweep's code before the first seed's deadline starts counting."""
        self.warmed_for = job
        self.client.run(warm_worker, job)

    def _lost(self, job: SeedJob) -> bool:
        """A seed's task came back ``dropped`` (cancelled, or lost) though this executor cancels only the tasks it
        records as ``timeout`` (and takes those out of flight first): the scheduler dropped it —
        seen on a loaded CI machine while another seed kept killing workers. Whether to run it
        again: yes, up to SEED_ATTEMPTS_MAX times in all, as for a worker's death."""
        cancelled = self.cancelled_by_dask.get(job.seed, 0) + 1
        self.cancelled_by_dask[job.seed] = cancelled
        if cancelled >= SEED_ATTEMPTS_MAX:
            return False
        self.stats.retries += 1
        return True

    def _row(self, distributed: Any, future: Any, job: SeedJob) -> dict[str, Any]:
        if future.status == "finished":
            row: dict[str, Any] = future.result()
            return row
        error = future.exception()
        if isinstance(error, distributed.KilledWorker):
            self.stats.worker_deaths += SEED_ATTEMPTS_MAX
            return crash_row(job, SEED_ATTEMPTS_MAX, "Dask KilledWorker")
        raise FarmWorkerError(f"Dask task for seed {job.seed} failed: {type(error).__name__}: {error}")

    def _expire(self, in_flight: dict[Any, tuple[SeedJob, float]]) -> Iterator[dict[str, Any]]:
        """Seeds past their hard deadline: record ``timeout`` and restart the worker that holds them.

        A seed's clock counts from the last moment it was seen *not* executing: submission, then,
        once it is in flight longer than its hard deadline, every poll that finds it still queued
        (behind a stuck seed on its worker thread, or on the scheduler). It expires only while it
        executes, after ``IN_FLIGHT_PER_THREAD`` deadlines of that clock — so a stuck seed is killed
        and the seed queued behind it is not: before, both had been submitted together and expired
        together (CI, a loaded machine). A restart starts every seed still in flight afresh: those
        queued on the restarted worker run again elsewhere, and the restart's seconds are no seed's.
        """
        now = time.monotonic()
        overdue = [future for future, (job, since) in in_flight.items() if _past(job, now - since, 1)]
        if not overdue:
            return
        executing = self._executing()
        expired = []
        for future in overdue:
            job, since = in_flight[future]
            if future.key not in executing:
                in_flight[future] = (job, now)
            elif _past(job, now - since, IN_FLIGHT_PER_THREAD):
                expired.append(future)
        if not expired:
            return
        stuck_workers = sorted({executing[future.key] for future in expired})
        for future in expired:
            job, since = in_flight.pop(future)
            future.cancel()
            self.stats.killed_for_timeout += 1
            yield timeout_row(job, now - since, None, None)
        self.client.restart_workers(stuck_workers, timeout=RESTART_TIMEOUT_S, raise_for_error=False)
        if self.warmed_for is not None:
            self._warm(self.warmed_for)
        restarted = time.monotonic()
        for future, (job, _since) in list(in_flight.items()):
            in_flight[future] = (job, restarted)

    def _executing(self) -> dict[Any, str]:
        """Task key -> address of the worker executing it (a worker that does not answer has none)."""
        answers = self.client.run(executing_task_keys, on_error="ignore")
        return {key: address for address, keys in sorted(answers.items()) for key in keys}

    def close(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    def __enter__(self) -> DaskExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
