"""The default executor: worker processes on this machine, one seed in flight per worker.

``concurrent.futures.ProcessPoolExecutor`` cannot do what a farm needs: when one worker dies the
whole pool is broken, and a single stuck worker cannot be killed. So this pool owns its processes.
Each worker has its own pipe; the parent sends it one job, waits on every pipe and every
process's sentinel at once, and so always knows which seed each worker holds. When a worker's
process ends without answering, its seed goes back in the queue (up to ``SEED_ATTEMPTS_MAX``
runs) and a fresh worker takes its place; when a seed passes its hard deadline, the watchdog
kills the worker and records ``timeout``. Workers start with ``forkserver`` (``spawn`` where it
is missing), never ``fork``: the parent holds an SQLite connection and maybe threads.

Workers ignore SIGINT: a Ctrl-C in the terminal reaches the whole process group, and it is the
parent that decides to stop (it closes the pool; nothing uncommitted counts as done).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Iterator
from multiprocessing.connection import Connection, wait
from typing import Any

from timetravel.farm.executor import (
    SEED_ATTEMPTS_MAX,
    ExecutorStats,
    FarmWorkerError,
    hard_deadline_s,
)
from timetravel.farm.job import SeedJob, crash_row, timeout_row
from timetravel.farm.worker import run_job

POLL_INTERVAL_S = 0.25
"""Longest wait between two looks at the deadlines (and at ``stop()``)."""
WORKER_JOIN_TIMEOUT_S = 2.0
WORKER_START_FAILURES_MAX = 5
"""Workers in a row that die before starting any seed: the installation is broken, stop the sweep."""
WORKERS_MAX = 1024
PRELOADED_MODULES = ["timetravel.farm.worker"]
"""Imported once in the fork server, so that a new worker starts in milliseconds."""


def default_workers() -> int:
    """One worker per CPU this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def _context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    context = multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")
    if "forkserver" in methods:
        context.set_forkserver_preload(PRELOADED_MODULES)
    return context


def _worker_main(connection: Connection) -> None:
    """A worker's loop: receive a job, say ("started",), then send ("row", row) or ("error", text).

    A ``None`` job ends the loop. "started" tells the parent that the worker is alive and holds the
    seed, so a worker that dies before it (a broken installation) is not blamed on the seed.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    while True:
        try:
            job = connection.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        connection.send(("started",))
        try:
            message: tuple[str, Any] = ("row", run_job(job))
        except Exception as error:
            message = ("error", f"{type(error).__name__}: {error}")
        connection.send(message)


class _Worker:
    def __init__(self, context: Any) -> None:
        self.connection, child = context.Pipe(duplex=True)
        self.process = context.Process(target=_worker_main, args=(child,), daemon=True)
        self.process.start()
        child.close()
        self.job: SeedJob | None = None
        self.started = 0.0
        self.seed_started = False

    def give(self, job: SeedJob) -> None:
        """Hand over a job; a worker that died already is noticed by its sentinel."""
        self.job = job
        self.started = time.monotonic()
        self.seed_started = False
        with contextlib.suppress(OSError):
            self.connection.send(job)

    def receive(self) -> tuple[str, Any] | None:
        """The worker's answer, None while it has none, or ("died", None) when its pipe is closed."""
        try:
            while self.connection.poll():
                message: tuple[str, Any] = self.connection.recv()
                if message[0] != "started":
                    return message
                self.seed_started = True
        except (EOFError, OSError):
            return ("died", None)
        return None

    def kill(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(WORKER_JOIN_TIMEOUT_S)
        self.connection.close()

    def how_it_ended(self) -> str:
        code = self.process.exitcode
        if code is not None and code < 0:
            return f"killed by signal {signal.Signals(-code).name}"
        return f"exit code {code}"


class LocalPool:
    """``workers`` processes on this machine (see the module docstring)."""

    name = "local"

    def __init__(self, workers: int | None = None) -> None:
        self.workers = default_workers() if workers is None else workers
        if not 1 <= self.workers <= WORKERS_MAX:
            raise ValueError(f"--workers must be in [1, {WORKERS_MAX}], got {self.workers}")
        self.stats = ExecutorStats()
        self._context = _context()
        self._pool: list[_Worker] = []
        self._start_failures = 0

    def worker_pids(self) -> list[int]:
        return [worker.process.pid for worker in self._pool if worker.process.pid is not None]

    def run(self, jobs: Iterator[SeedJob], stop: Callable[[], bool]) -> Iterator[dict[str, Any]]:
        retry: deque[SeedJob] = deque()
        attempts: dict[int, int] = {}
        exhausted = False
        first = next(jobs, None)
        if first is None:
            return
        jobs = itertools.chain([first], jobs)
        while len(self._pool) < self.workers:
            self._pool.append(_Worker(self._context))
        while True:
            for worker in self._pool:
                if worker.job is None and not stop():
                    job = retry.popleft() if retry else next(jobs, None)
                    if job is None:
                        exhausted = True
                        break
                    worker.give(job)
            busy = [worker for worker in self._pool if worker.job is not None]
            if not busy and (exhausted or stop()):
                return
            yield from self._collect(busy, retry, attempts)

    def _collect(
        self, busy: list[_Worker], retry: deque[SeedJob], attempts: dict[int, int]
    ) -> Iterator[dict[str, Any]]:
        waitables: list[Any] = [worker.connection for worker in busy]
        waitables += [worker.process.sentinel for worker in busy]
        ready = set(wait(waitables, timeout=self._wait_s(busy)))
        for worker in busy:
            job = worker.job
            assert job is not None
            message = worker.receive() if worker.connection in ready else None
            if message is None and worker.process.sentinel in ready:
                message = worker.receive() or ("died", None)
            if message is not None and message[0] == "died":
                yield from self._worker_died(worker, job, retry, attempts)
            elif message is not None and message[0] == "error":
                raise FarmWorkerError(f"worker failed on seed {job.seed}: {message[1]}")
            elif message is not None:
                row = message[1]
                row["attempts"] = attempts.pop(job.seed, 0) + 1
                worker.job = None
                self._start_failures = 0
                yield row
            elif self._past_deadline(worker, job):
                self.stats.killed_for_timeout += 1
                attempts.pop(job.seed, None)
                self._replace(worker)
                yield timeout_row(job, time.monotonic() - worker.started, None, None)

    def _worker_died(
        self, worker: _Worker, job: SeedJob, retry: deque[SeedJob], attempts: dict[int, int]
    ) -> Iterator[dict[str, Any]]:
        """Put the seed back (or record ``crash`` after its last attempt) and start a new worker."""
        worker.process.join(WORKER_JOIN_TIMEOUT_S)
        how = worker.how_it_ended()
        self.stats.worker_deaths += 1
        seed_started = worker.seed_started
        self._replace(worker)
        if not seed_started:
            self._start_failures += 1
            if self._start_failures >= WORKER_START_FAILURES_MAX:
                raise FarmWorkerError(
                    f"{self._start_failures} workers in a row died before starting a seed ({how})"
                )
            retry.append(job)
            return
        runs = attempts[job.seed] = attempts.get(job.seed, 0) + 1
        if runs < SEED_ATTEMPTS_MAX:
            self.stats.retries += 1
            retry.append(job)
            return
        attempts.pop(job.seed)
        yield crash_row(job, runs, how)

    def _past_deadline(self, worker: _Worker, job: SeedJob) -> bool:
        limit = hard_deadline_s(job.seed_timeout_s)
        return limit is not None and time.monotonic() - worker.started > limit

    def _wait_s(self, busy: list[_Worker]) -> float:
        now = time.monotonic()
        wait_s = POLL_INTERVAL_S
        for worker in busy:
            limit = hard_deadline_s(worker.job.seed_timeout_s if worker.job else None)
            if limit is not None:
                wait_s = min(wait_s, max(0.0, worker.started + limit - now))
        return wait_s

    def _replace(self, worker: _Worker) -> None:
        worker.kill()
        self._pool[self._pool.index(worker)] = _Worker(self._context)

    def close(self) -> None:
        """Stop every worker: idle ones are asked to exit, busy ones are killed."""
        for worker in self._pool:
            if worker.job is None:
                with contextlib.suppress(OSError):
                    worker.connection.send(None)
        deadline = time.monotonic() + WORKER_JOIN_TIMEOUT_S
        for worker in self._pool:
            if worker.job is None:
                worker.process.join(max(0.0, deadline - time.monotonic()))
            worker.kill()
        self._pool.clear()

    def __enter__(self) -> LocalPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
