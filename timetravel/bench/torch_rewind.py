"""Rewinding a recording of the user's own torch script: the figures of ``bench torch`` (issue 14, part 6).

The workload is docs/examples/torch/tiny_gpt.py on ``RANKS`` ranks (``MODEL_ARGUMENTS``: 1.25M
parameters, 50 optimizer steps, about 300 collectives with 1 MB DDP buckets), the default
``state_every_steps``:

* ``record_overhead_ratio`` — wall time of the run recorded (``record_run`` at the torch snapshot
  interval ``SNAPSHOT_EVERY_EVENTS_TORCH``) over the same config and seed not recorded (``run_report``).
  Target ≤ 1.3.
* ``seek_p50_ms`` / ``seek_p95_ms`` — after one pass over every snapshot (a ``goto_event`` to each
  non-final snapshot, which rebuilds the rank checkpoints by re-execution), ``SEEKS`` random
  ``goto_event`` targets from a seeded ``random.Random``. Target p95 ≤ 1,000 ms. The same figures at
  twice the interval (a second recording) are ``seek_p50_ms_interval_<n>`` / ``seek_p95_ms_interval_<n>``:
  a seek re-executes up to one interval from the nearest checkpoint, so the figure grows with it.
* ``seek_replay_events_mean`` / ``seek_ms_per_replayed_event`` — the events each random seek
  re-executed (``session.last_replay_events``) and the slope of seek time over them: with the part of
  a seek that re-executes nothing (``seek_fixed_ms``, the intercept: restoring the World's snapshot
  and resuming forked checkpoints), this says what dominates.
* ``seek_cold_ms`` — the first seek (to the middle) after opening the recording in a new process: no
  checkpoint exists yet, the ranks re-execute from the start.
* ``checkpoint_uss_bytes_per_rank`` / ``checkpoints_live`` — ``session.source.memory()`` after the
  rebuilds (seeks read the journal and run no rank; a rebuild runs them and keeps checkpoints):
  private (USS) bytes per checkpoint process, and the checkpoint sets kept.
* ``branch_wall_s`` — ``branch`` from the middle with ``reduce_order=arrival``: fork, run the
  alternate future to the end and store it.
* ``record_bytes`` — the recording's size on disk.
* ``seek_failures`` / ``seek_failure_first`` — seeks whose re-execution failed (counted, not hidden).

The 2x-interval recording gets half the random seeks (``SEEKS // 2``), to keep the suite short.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
GPT_SCRIPT = ROOT / "docs" / "examples" / "torch" / "tiny_gpt.py"
RANKS = 4
MODEL_ARGUMENTS = "--steps 50 --width 160 --layers 4 --bucket-mb 1 --context 16 --batch 4"
QUICK_ARGUMENTS = "--steps 4 --width 64 --layers 2 --bucket-mb 1"
SEEKS = 20
SEEKS_QUICK = 5
REBUILDS = 10
REBUILDS_QUICK = 2
SEEK_RANDOM_SEED = 14
SEED = 0

COLD_SEEK = """
import json, sys, time
from timetravel.explore import Session
from timetravel.torch.world.specs import launch_naming
with Session.open(sys.argv[1], launch=launch_naming([sys.argv[2]])) as session:
    started = time.perf_counter()
    session.goto_event(int(sys.argv[3]))
    wall_ms = (time.perf_counter() - started) * 1e3
    print(json.dumps({"wall_ms": wall_ms, "events": session.position.events}))
"""


def _launch() -> Any:
    from timetravel.torch.world.specs import launch_naming

    return launch_naming([str(GPT_SCRIPT)])


def _config(arguments: str, ranks: int = RANKS) -> tuple[Any, dict[str, Any]]:
    from timetravel.scenarios import get_scenario

    scenario = get_scenario("torch")
    config = scenario.resolve_config(
        [f"script={GPT_SCRIPT}", f"nproc={ranks}", f"args={arguments}", "rank_output=quiet"]
    )
    return scenario, config


def unrecorded_s(arguments: str, ranks: int = RANKS) -> float:
    from timetravel.sim.runner import run_report

    scenario, config = _config(arguments, ranks)
    started = time.perf_counter()
    report, _world = run_report(scenario, config, SEED, launch=_launch())
    wall_s = time.perf_counter() - started
    _check(report)
    return wall_s


def recorded_s(arguments: str, path: Path, interval: int, ranks: int = RANKS) -> tuple[float, dict[str, Any]]:
    from timetravel.recording import record_run

    scenario, config = _config(arguments, ranks)
    started = time.perf_counter()
    report, _world = record_run(
        scenario, config, SEED, path, snapshot_every_events=interval, force=True, launch=_launch()
    )
    wall_s = time.perf_counter() - started
    _check(report)
    return wall_s, report


def _check(report: dict[str, Any]) -> None:
    if report["outcome"] != "pass":
        raise RuntimeError(f"bench torch rewind run failed: {report['failure']}")


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile: with 20 seeks, p95 is the 19th fastest (one outlier may exceed it)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(fraction * len(ordered)) - 1)]


def seeks_of(path: Path, seeks: int, *, branch_too: bool, rebuilds: int = 0) -> dict[str, Any]:
    """One pass over every snapshot, then ``seeks`` random targets, then ``rebuilds`` random targets
    at each of which a command reads the tensors (their values rebuilt by re-executing the ranks:
    ``Session.with_values``); optionally a branch at the middle."""
    from timetravel.explore import Session

    with Session.open(path, launch=_launch()) as session:
        snapshots = [info.events for info in session.snapshots()]
        end = session.end.events
        started = time.perf_counter()
        for events in snapshots:
            if 0 < events < end - 1:
                # one event past it: a seek keeps checkpoints at the snapshots it runs through,
                # not at one where it stops
                session.goto_event(events + 1)
        pass_s = time.perf_counter() - started
        chooser = random.Random(SEEK_RANDOM_SEED)
        walls_ms: list[float] = []
        replayed: list[int] = []
        failed: list[str] = []
        for _ in range(seeks):
            target = chooser.randrange(1, end)
            started = time.perf_counter()
            session.goto_event(target)
            walls_ms.append((time.perf_counter() - started) * 1e3)
            replayed.append(session.last_replay_events)
            failed.extend(_failure(session, target))
        rebuilt = _rebuilds(session, rebuilds, chooser)
        # seeks read the journal (no rank runs); the rebuilds ran the ranks and kept checkpoints
        memory_of = getattr(session.source, "memory", None)  # a torch recording's source: TorchWorlds
        result: dict[str, Any] = {
            "end_events": end,
            "snapshots": len(snapshots),
            "pass_s": pass_s,
            "memory": memory_of() if callable(memory_of) else {},
            "walls_ms": walls_ms,
            "replayed": replayed,
            "failed": failed,
            **rebuilt,
        }
        if branch_too:
            from timetravel.explore.branching import branch
            from timetravel.explore.work import ExploreError

            session.goto_event(end // 2)  # the fork point is the cursor: the session is its own track
            if session.world.failures:  # a re-execution that failed (counted): once more from a restore
                failed.extend(_failure(session, end // 2))
                session.goto_event(0)
                session.goto_event(end // 2)
            started = time.perf_counter()
            try:
                branch(session, None, {"settings": ["reduce_order=arrival"]})
                result["branch_wall_s"] = time.perf_counter() - started
            except ExploreError as error:
                failed.append(f"branch at #{end // 2}: {error}")
                result["branch_wall_s"] = None
        return result


def _rebuilds(session: Any, count: int, chooser: random.Random) -> dict[str, Any]:
    """``count`` random targets: a seek (from the journal), then the tensors rebuilt there — what a
    command that reads them (print, diff of a collective's inputs) waits for; checkpoints kept on
    the way serve the next ones."""
    end = session.end.events
    walls_ms: list[float] = []
    executed: list[int] = []
    for _ in range(count):
        target = chooser.randrange(1, end)
        session.goto_event(target)
        before = session.source.reexecuted_events
        started = time.perf_counter()
        with session.with_values():
            walls_ms.append((time.perf_counter() - started) * 1e3)
        executed.append(session.source.reexecuted_events - before)
    return {"rebuild_walls_ms": walls_ms, "rebuild_executed": executed}


def _failure(session: Any, target: int) -> list[str]:
    """A seek whose re-execution failed (a rank raised while resumed): said, never hidden."""
    if not session.world.failures:
        return []
    failure = session.world.failures[0]
    detail = str(failure.get("message") or failure.get("detail") or "").strip().splitlines()
    return [f"seek to #{target}: {failure['signature']}" + (f" ({detail[-1][:200]})" if detail else "")]


def _cold_seek_ms(path: Path, target: int) -> float:
    completed = subprocess.run(
        [sys.executable, "-c", COLD_SEEK, str(path), str(GPT_SCRIPT), str(target)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    if completed.returncode != 0:
        last_line = (completed.stderr.strip().splitlines() or ["no output"])[-1]
        raise RuntimeError(f"the cold seek failed: {last_line}")
    return float(json.loads(completed.stdout.strip().splitlines()[-1])["wall_ms"])


def _slope(replayed: list[int], walls_ms: list[float]) -> tuple[float, float]:
    """Least squares of seek time over re-executed events: (ms per event, fixed ms)."""
    if len(set(replayed)) < 2:
        return 0.0, statistics.fmean(walls_ms)
    slope, intercept = statistics.linear_regression([float(n) for n in replayed], walls_ms)
    return slope, intercept


def run_rewind_bench(quick: bool = False) -> dict[str, Any]:
    from timetravel.torch.protocol.limits import SNAPSHOT_EVERY_EVENTS_TORCH

    arguments = QUICK_ARGUMENTS if quick else MODEL_ARGUMENTS
    seeks = SEEKS_QUICK if quick else SEEKS
    interval = SNAPSHOT_EVERY_EVENTS_TORCH
    bench_started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="tt-bench-torch-") as directory:
        path = Path(directory) / "gpt.ttr"
        wide_path = Path(directory) / f"gpt_{2 * interval}.ttr"
        unrecorded_s(QUICK_ARGUMENTS)  # starts the zygote (it imports torch): both runs are warm
        plain_s = unrecorded_s(arguments)
        record_s, report = recorded_s(arguments, path, interval)
        record_bytes = path.stat().st_size
        warm = seeks_of(path, seeks, branch_too=True, rebuilds=REBUILDS_QUICK if quick else REBUILDS)
        cold_ms = _cold_seek_ms(path, warm["end_events"] // 2)
        recorded_s(arguments, wide_path, 2 * interval)
        wide = seeks_of(wide_path, max(seeks // 2, 1), branch_too=False)
    slope_ms, fixed_ms = _slope(warm["replayed"], warm["walls_ms"])
    memory = warm["memory"]
    steps = report["summary"]["optimizer_steps"]
    return {
        "rewind_workload": f"docs/examples/torch/tiny_gpt.py {arguments}, {RANKS} ranks, "
        f"{warm['end_events']} events, snapshot every {interval} events",
        "record_overhead_ratio": round(record_s / plain_s, 3),
        "recorded_run_s": round(record_s, 3),
        "unrecorded_run_s": round(plain_s, 3),
        "record_bytes": record_bytes,
        "record_bytes_per_step": record_bytes // max(steps, 1),
        "rebuild_p50_ms": round(percentile(warm["rebuild_walls_ms"], 0.50), 1),
        "rebuild_p95_ms": round(percentile(warm["rebuild_walls_ms"], 0.95), 1),
        "rebuild_executed_events_mean": round(statistics.fmean(warm["rebuild_executed"]), 1),
        "record_t_end_ns": report["t_end_ns"],
        "snapshot_pass_s": round(warm["pass_s"], 3),
        "seek_p50_ms": round(percentile(warm["walls_ms"], 0.50), 1),
        "seek_p95_ms": round(percentile(warm["walls_ms"], 0.95), 1),
        f"seek_p50_ms_interval_{2 * interval}": round(percentile(wide["walls_ms"], 0.50), 1),
        f"seek_p95_ms_interval_{2 * interval}": round(percentile(wide["walls_ms"], 0.95), 1),
        "seek_replay_events_mean": round(statistics.fmean(warm["replayed"]), 1),
        "seek_ms_per_replayed_event": round(slope_ms, 2),
        "seek_fixed_ms": round(fixed_ms, 1),
        "seek_cold_ms": round(cold_ms, 1),
        "checkpoint_uss_bytes_per_rank": memory.get("uss_bytes_per_process", 0),
        "checkpoints_live": memory.get("checkpoints", 0),
        "checkpoints_max": memory.get("checkpoints_max"),
        "branch_wall_s": None if warm["branch_wall_s"] is None else round(warm["branch_wall_s"], 3),
        "seek_failures": len(warm["failed"]) + len(wide["failed"]),
        "seek_failure_first": (warm["failed"] + wide["failed"] + [None])[0],
        "rewind_bench_s": round(time.perf_counter() - bench_started, 1),
    }


if __name__ == "__main__":
    print(json.dumps(run_rewind_bench(quick="--quick" in sys.argv), indent=1))
