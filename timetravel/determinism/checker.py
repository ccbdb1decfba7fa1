"""``check_determinism``: run every seed in several processes, compare, and explain each mismatch.

Phase 1: the seeds are split into groups; each group runs in ``runs`` worker processes, each with
its own PYTHONHASHSEED, ``processes`` workers at a time. A worker reports each seed's chain digests
(one per 4096-event batch), chain head and final state hash. A seed is consistent when every run
reports the same.

Phase 2, for each mismatching seed: the first differing digest names the first differing batch.
Two fresh workers (the hash seeds of the two disagreeing runs) re-run to that batch and list its
events; the first event that differs is *the* divergent event (time, node, kind). Both then run
exactly to just after that event and the node states that differ there are diffed. That diff
shows both the cause (state that already differed, e.g. a stored set order) and the effect (the
node that received the event in one run and not the other).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

from timetravel.determinism.diff import diff_values
from timetravel.determinism.processes import (
    WORKER_TIMEOUT_S_DEFAULT,
    CheckError,
    Worker,
    decode_states,
    hash_seed,
    run_digests,
)
from timetravel.determinism.trace import BATCH_EVENTS, RunSpec
from timetravel.sim.encoding import merkle_root, unpack
from timetravel.sim.runner import reproduce_command

SEEDS_MAX = 1_000_000
RUNS_PER_SEED_DEFAULT = 2
RUNS_PER_SEED_MAX = 8
PROCESSES_DEFAULT = 2
PROCESSES_MAX = 64
SEEDS_PER_WORKER_MAX = 32
"""A worker runs a group of seeds so that interpreter start-up (~0.2 s) is paid per group."""
DIFF_NODES_MAX = 8
DIFF_ENTRIES_MAX = 40

ProgressCallback = Callable[[int, int, int], None]
"""``progress(seeds_done, seeds_total, mismatches_so_far)``."""


class SeedRangeError(ValueError):
    """A ``--seeds`` value that is not ``A:B`` with A < B (or one seed): bad input."""


def parse_seed_range(text: str) -> range:
    """``A:B`` is the seeds A, A+1, ..., B-1 (like a Python range); ``N`` is the one seed N."""
    first, separator, stop = text.partition(":")
    try:
        seeds = range(int(first), int(stop)) if separator else range(int(first), int(first) + 1)
    except ValueError:
        raise SeedRangeError(f"--seeds expects A:B (seeds A to B-1) or one seed, got {text!r}") from None
    if not seeds:
        raise SeedRangeError(f"--seeds {text}: the range is empty (A:B means A, A+1, ..., B-1)")
    if len(seeds) > SEEDS_MAX:
        raise SeedRangeError(f"--seeds {text}: at most {SEEDS_MAX} seeds per check")
    return seeds


@dataclass(frozen=True)
class RunResult:
    """One run of one seed in one process (phase 1)."""

    seed: int
    run: int
    hash_seed: int
    line: dict[str, Any]

    def fingerprint(self) -> tuple[Any, ...]:
        line = self.line
        return (line["head"], line["state_hash"], line["events"], tuple(line["digests"]))


def plan_groups(seeds: range, processes: int) -> list[list[int]]:
    """Groups of consecutive seeds, small enough that every process gets work and progress moves."""
    size = max(1, min(SEEDS_PER_WORKER_MAX, math.ceil(len(seeds) / (processes * 2))))
    return [list(seeds[start : start + size]) for start in range(0, len(seeds), size)]


def group_hash_seeds(first_seed: int, runs: int) -> list[int]:
    """Distinct PYTHONHASHSEED values for the ``runs`` runs of one group."""
    chosen: list[int] = []
    candidate = 0
    while len(chosen) < runs:
        value = hash_seed(first_seed, candidate)
        if value not in chosen:
            chosen.append(value)
        candidate += 1
    return chosen


class _Collector:
    """Gathers phase-1 lines from worker threads; compares a seed as soon as all its runs are in."""

    def __init__(self, runs: int, total: int, progress: ProgressCallback | None) -> None:
        self.runs = runs
        self.total = total
        self.progress = progress
        self.pending: dict[int, list[RunResult]] = {}
        self.outcomes: dict[int, str] = {}
        self.mismatching: dict[int, tuple[RunResult, RunResult]] = {}
        self.done = 0
        self.cancelled = threading.Event()
        self._lock = threading.Lock()

    def add(self, run: int, seed_for_hash: int, line: dict[str, Any]) -> None:
        if self.cancelled.is_set():
            raise CheckError("cancelled")
        result = RunResult(int(line["seed"]), run, seed_for_hash, line)
        with self._lock:
            results = self.pending.setdefault(result.seed, [])
            results.append(result)
            if len(results) < self.runs:
                return
            del self.pending[result.seed]
            self._compare(sorted(results, key=lambda item: item.run))
            self.done += 1
            if self.progress is not None:
                self.progress(self.done, self.total, len(self.mismatching))

    def _compare(self, results: list[RunResult]) -> None:
        first = results[0]
        self.outcomes[first.seed] = first.line["outcome"]
        for other in results[1:]:
            if other.fingerprint() != first.fingerprint():
                self.mismatching[first.seed] = (first, other)
                return


def check_determinism(
    spec: RunSpec,
    seeds: range,
    *,
    runs: int = RUNS_PER_SEED_DEFAULT,
    processes: int = PROCESSES_DEFAULT,
    timeout_s: float = WORKER_TIMEOUT_S_DEFAULT,
    progress: ProgressCallback | None = None,
) -> dict[str, Any]:
    """Check ``seeds`` and return the report (``seeds_checked``, ``mismatches``, ...)."""
    if not 2 <= runs <= RUNS_PER_SEED_MAX:
        raise SeedRangeError(f"--runs must be between 2 and {RUNS_PER_SEED_MAX}")
    if not 1 <= processes <= PROCESSES_MAX:
        raise SeedRangeError(f"--processes must be between 1 and {PROCESSES_MAX}")
    scenario, config, _until_ns = spec.resolve()  # bad input fails here, before any process starts
    collector = _Collector(runs, len(seeds), progress)
    _run_phase_one(spec, seeds, runs, processes, timeout_s, collector)
    mismatches = [
        locate_divergence(spec, *collector.mismatching[seed], timeout_s=timeout_s)
        for seed in seeds
        if seed in collector.mismatching
    ]
    outcomes = list(collector.outcomes.values())
    return {
        "scenario": scenario.name,
        "config": config,
        "determinism": spec.determinism or scenario.determinism,
        "seeds": [seeds.start, seeds.stop],
        "runs_per_seed": runs,
        "seeds_checked": len(seeds),
        "consistent": len(seeds) - len(mismatches),
        "mismatches": mismatches,
        "outcomes": {"pass": outcomes.count("pass"), "fail": outcomes.count("fail")},
    }


def _run_phase_one(
    spec: RunSpec, seeds: range, runs: int, processes: int, timeout_s: float, collector: _Collector
) -> None:
    with ThreadPoolExecutor(max_workers=processes) as pool:
        futures = []
        for group in plan_groups(seeds, processes):
            for run, seed_for_hash in enumerate(group_hash_seeds(group[0], runs)):

                def on_result(
                    line: dict[str, Any], run: int = run, seed_for_hash: int = seed_for_hash
                ) -> None:
                    collector.add(run, seed_for_hash, line)

                futures.append(pool.submit(run_digests, spec, group, seed_for_hash, timeout_s, on_result))
        done, _ = wait(futures, return_when=FIRST_EXCEPTION)
        errors = [future.exception() for future in done if future.exception() is not None]
        if errors:
            collector.cancelled.set()
            for future in futures:
                future.cancel()
            raise errors[0]  # type: ignore[misc]


def first_differing_batch(a: dict[str, Any], b: dict[str, Any]) -> int | None:
    """Index of the first chain batch where two runs differ; None when their chains agree."""
    digests_a, digests_b = a["digests"], b["digests"]
    for index in range(min(len(digests_a), len(digests_b))):
        if digests_a[index] != digests_b[index]:
            return index
    if len(digests_a) != len(digests_b) or a["head"] != b["head"]:
        return min(len(digests_a), len(digests_b))  # the shorter run's open batch
    return None


def first_differing_record(records_a: list[Any], records_b: list[Any]) -> int | None:
    """Index of the first event that differs in two batches (or where one batch ends first)."""
    for index in range(min(len(records_a), len(records_b))):
        if records_a[index] != records_b[index]:
            return index
    if len(records_a) != len(records_b):
        return min(len(records_a), len(records_b))
    return None


def _event(records: list[Any], index: int | None) -> dict[str, Any] | None:
    if index is None or index >= len(records):
        return None
    t_ns, seq, node, kind, payload_digest = records[index]
    return {"t_ns": t_ns, "node": node, "kind": kind, "seq": seq, "payload_digest": payload_digest}


def _reproduced(
    phase_one: dict[str, Any], window: dict[str, Any], batch: int | None, end: dict[str, Any]
) -> bool:
    """Did the re-run repeat its own phase-1 run (same hash seed, fresh process) up to the window?"""
    if batch is None:
        parts = [(name, bytes.fromhex(digest)) for name, digest in end["parts"].items()]
        return bool(merkle_root(parts).hex() == phase_one["state_hash"])
    digests = phase_one["digests"]
    expected = digests[batch] if batch < len(digests) else phase_one["head"]
    return bool(window["digests"] == digests[:batch] and window["window_digest"] == expected)


def locate_divergence(spec: RunSpec, a: RunResult, b: RunResult, *, timeout_s: float) -> dict[str, Any]:
    """Re-run both sides of a mismatching seed and name the first divergent event and the state diff."""
    batch = first_differing_batch(a.line, b.line)
    arguments = ["trace", "--seed", str(a.seed)] + ([] if batch is None else ["--batch", str(batch)])
    workers = [Worker(spec, arguments, side.hash_seed, timeout_s) for side in (a, b)]
    try:
        windows = [worker.read_one() for worker in workers]
        index = (
            None if batch is None else first_differing_record(windows[0]["records"], windows[1]["records"])
        )
        for worker in workers:
            worker.send({"state_after": index})
        ends = [worker.read_one() for worker in workers]
        nodes, parts = _differing(ends[0], ends[1])
        for worker in workers:
            worker.send({"states": nodes})
        states = [decode_states(worker.read_one()) for worker in workers]
        for worker in workers:
            worker.send({"quit": True})
            worker.finish()
    finally:
        for worker in workers:
            worker.kill()
    records = [window["records"] for window in windows]
    reproducible = all(
        _reproduced(side.line, window, batch, end)
        for side, window, end in zip((a, b), windows, ends, strict=True)
    )
    return {
        "seed": a.seed,
        "hash_seeds": [a.hash_seed, b.hash_seed],
        "runs": [a.run, b.run],
        "event_index": None if batch is None or index is None else batch * BATCH_EVENTS + index,
        "event": _event(records[0], index),
        "other_event": _event(records[1], index),
        "chains_agree": batch is None,
        "reproducible": reproducible,
        "state_events": [ends[0]["events"], ends[1]["events"]],
        "parts_differing": parts,
        "nodes_differing": nodes,
        "state_diff": _state_diff(nodes, states[0], states[1]),
        "results": [_summary(a), _summary(b)],
        "reproduce": [_reproduce(spec, a), _reproduce(spec, b)],
    }


def _differing(end_a: dict[str, Any], end_b: dict[str, Any]) -> tuple[list[str], list[str]]:
    nodes_a, nodes_b = end_a["nodes"], end_b["nodes"]
    names = list(nodes_a) + [name for name in nodes_b if name not in nodes_a]
    nodes = [name for name in names if nodes_a.get(name) != nodes_b.get(name)][:DIFF_NODES_MAX]
    parts = [name for name in end_a["parts"] if end_a["parts"][name] != end_b["parts"].get(name)]
    return nodes, parts


def _state_diff(
    nodes: list[str], states_a: dict[str, bytes | None], states_b: dict[str, bytes | None]
) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for name in nodes:
        packed_a, packed_b = states_a.get(name), states_b.get(name)
        if packed_a is None or packed_b is None:
            entries.append(
                {
                    "node": name,
                    "path": "",
                    "a": "<absent>" if packed_a is None else "node",
                    "b": "<absent>" if packed_b is None else "node",
                }
            )
            continue
        remaining = DIFF_ENTRIES_MAX - len(entries)
        if remaining <= 0:
            break
        for entry in diff_values(unpack(packed_a), unpack(packed_b), limit=remaining):
            entries.append({"node": name, **entry})
    return entries


def _summary(result: RunResult) -> dict[str, Any]:
    line = result.line
    return {
        "hash_seed": result.hash_seed,
        "events": line["events"],
        "outcome": line["outcome"],
        "hash_chain": line["head"],
        "state_hash": line["state_hash"],
    }


def _reproduce(spec: RunSpec, result: RunResult) -> str:
    command = reproduce_command(
        spec.scenario_name, result.seed, spec.settings, spec.until, spec.scenario_target, spec.determinism
    )
    return f"PYTHONHASHSEED={result.hash_seed} {command}"
