"""Start checker workers as fresh interpreters with a chosen PYTHONHASHSEED, and talk to them.

Each worker is ``sys.executable -m timetravel.determinism.worker`` with the parent's import path
(so it loads the same timetravel and the same ``--scenario module:attr``), the parent's
environment and its own ``PYTHONHASHSEED``. A watchdog kills a worker that outlives its time
budget; any failure becomes a :class:`CheckError` naming the seed, the hash seed and the worker's
last line of stderr.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from typing import IO, Any

import xxhash

from timetravel.determinism.trace import RunSpec

WORKER_MODULE = "timetravel.determinism.worker"
HASH_SEED_MAX = 4_294_967_295
"""Largest PYTHONHASHSEED Python accepts (0 would switch hash randomization off: never used)."""
WORKER_TIMEOUT_S_DEFAULT = 600.0
STDERR_TAIL_BYTES = 4096


class CheckError(RuntimeError):
    """The check could not run (a worker crashed, timed out or spoke nonsense): exit code 2."""


def hash_seed(first_seed: int, run: int) -> int:
    """The PYTHONHASHSEED of run ``run`` of the worker whose first seed is ``first_seed``.

    Derived, not random, so a check can be repeated exactly; different for every run of a seed
    (the caller checks) and spread over the whole range, so each group of seeds tries new orders.
    """
    return (
        1 + xxhash.xxh3_64_intdigest(f"check-determinism\x00{first_seed}\x00{run}".encode()) % HASH_SEED_MAX
    )


def import_path() -> str:
    """The parent's ``sys.path`` as a PYTHONPATH, so a worker imports exactly the same code."""
    entries: list[str] = []
    for entry in sys.path:
        path = os.path.abspath(entry or os.getcwd())
        if os.path.exists(path) and path not in entries:
            entries.append(path)
    return os.pathsep.join(entries)


def worker_environment(seed_for_hash: int) -> dict[str, str]:
    environment = dict(os.environ)
    environment["PYTHONHASHSEED"] = str(seed_for_hash)
    environment["PYTHONPATH"] = import_path()
    return environment


class Worker:
    """One worker process: its JSON lines out, requests in, a watchdog, and its stderr's tail."""

    def __init__(self, spec: RunSpec, arguments: list[str], seed_for_hash: int, timeout_s: float) -> None:
        self.hash_seed = seed_for_hash
        # The stderr file lives as long as the worker; kill() and finish() close it.
        self._stderr: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115
        command = [sys.executable, "-m", WORKER_MODULE, *arguments, *spec.arguments()]
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            text=True,
            env=worker_environment(seed_for_hash),
        )
        self.timed_out = False
        self._watchdog = threading.Timer(timeout_s, self._expire)
        self._watchdog.daemon = True
        self._watchdog.start()

    def _expire(self) -> None:
        self.timed_out = True
        self.process.kill()

    def lines(self) -> Iterator[dict[str, Any]]:
        """Every JSON line the worker writes, until it closes its output."""
        assert self.process.stdout is not None
        for line in self.process.stdout:
            yield self._decode(line)

    def send(self, message: dict[str, Any]) -> None:
        """Send one request line (read its answer with :meth:`read_one`)."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(json.dumps(message) + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            raise self.failure("stopped before a request") from None

    def read_one(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            raise self.failure("stopped without output")
        return self._decode(line)

    def _decode(self, line: str) -> dict[str, Any]:
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            raise self.failure(f"wrote something that is not JSON: {line[:80]!r}") from None
        if not isinstance(value, dict):
            raise self.failure("wrote JSON that is not an object")
        return value

    def finish(self) -> None:
        """Close the worker's input, wait for it to exit, and raise if it failed."""
        if self.process.stdin is not None and not self.process.stdin.closed:
            with contextlib.suppress(BrokenPipeError):
                self.process.stdin.close()
        code = self.process.wait()
        self._watchdog.cancel()
        if code != 0 or self.timed_out:
            raise self.failure(f"exited with code {code}")
        self._stderr.close()

    def kill(self) -> None:
        self._watchdog.cancel()
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        self._stderr.close()

    def failure(self, what: str) -> CheckError:
        if self.timed_out:
            what = "was stopped after its time budget (--timeout)"
        self._stderr.seek(0, os.SEEK_END)
        size = self._stderr.tell()
        self._stderr.seek(max(0, size - STDERR_TAIL_BYTES))
        tail = [line for line in self._stderr.read().decode(errors="replace").splitlines() if line.strip()]
        last = f": {tail[-1].strip()}" if tail else ""
        return CheckError(f"worker (PYTHONHASHSEED={self.hash_seed}) {what}{last}")


def run_digests(
    spec: RunSpec,
    seeds: list[int],
    seed_for_hash: int,
    timeout_s: float,
    on_result: Callable[[dict[str, Any]], None],
) -> None:
    """Run phase 1 for ``seeds`` in one worker; ``on_result`` gets each seed's line as it arrives."""
    worker = Worker(spec, ["digests", "--seeds", ",".join(map(str, seeds))], seed_for_hash, timeout_s)
    try:
        for line in worker.lines():
            on_result(line)
        worker.finish()
    finally:
        worker.kill()


def decode_states(answer: dict[str, Any]) -> dict[str, bytes | None]:
    return {name: None if text is None else base64.b64decode(text) for name, text in answer.items()}
