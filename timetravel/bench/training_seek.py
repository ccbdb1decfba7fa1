"""``timetravel bench training``: seeking in a 10,000-rank recording (issue 18: ``seek_p95_ms`` <= 200).

The workload is the bench's own ``tree_10000`` (10,000 ranks, tree all-reduce, 256 parameters),
recorded for SEEK_STEPS steps at the default snapshot interval, then opened with
:class:`~timetravel.explore.session.Session` and sought SEEKS times to uniformly random times
(seeded, so every run seeks the same moments). A seek restores the nearest snapshot at or before
the target and re-executes up to one snapshot interval of events, checking the hash chain; the
restore decodes afresh the ranks that re-execution runs and shares the others' decoded states with
earlier seeks (recording/shared_nodes.py), so a seek into a snapshot visited before decodes a few
hundred to two thousand rank states and the first seek into each snapshot decodes all of them. A
seek back into a quiet interval the Session has been in (the cursor's world, or one of the two it
last left: explore/parked_worlds.py) re-executes and decodes nothing. The recording's snapshots are
every 8,192 events (11 of those 14 inside the two all-reduce bursts) plus a quiet snapshot at the
start of each of the three quiet intervals (recording/recorder.py: where the next event is >= 1 ms
away; 17 in all), so the 20 seeks fall in three quiet intervals: three are first visits, each
restoring its interval's quiet snapshot (10,000 rank states decoded, 0-1 events re-executed), and
the p95 (the 20th of 20) is the slowest of those.

**Where a slow seek's time went.** Beside the wall times the bench reports each seek's CPU time
split into user and system time and the minor page faults it took (``resource.getrusage``, read
around each seek, outside the simulation path). A first visit grows the process by the decoded world
it keeps (~60-100 MB at 10,000 ranks: ~15,000-25,000 new pages), and what a new page costs is the
machine's, not the code's: well under a microsecond on bare metal, but 2-15 us on a VM whose balloon
hands freed guest memory back to the host (free page reporting), where 20,000 faults cost 30-350 ms
of system time from one run to the next. ``seek_10000_p95_user_ms`` (the p95 of the seeks' user CPU
time) is the figure the code decides; ``seek_10000_p95_ms`` (wall) is what a user waits.
Run in a fresh process by bench/training.py, like the other workloads, so that its peak RSS is
its own.

Figures: ``seek_10000_p50_ms``, ``seek_10000_p95_ms``, ``seek_10000_max_ms``,
``seek_10000_p95_user_ms``, ``seek_10000_p95_system_ms``, ``seek_10000_page_faults`` (minor faults
of the 20 seeks together), ``seek_10000_open_ms``, ``seek_10000_record_s``, ``seek_10000_recording_bytes``,
``seek_10000_snapshots``, ``seek_10000_peak_rss_gib``.
"""

from __future__ import annotations

import random
import resource
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from timetravel.bench.timing import percentile, timed

SEEK_RANKS = 10_000
SEEK_STEPS = 2
SEEKS = 20
QUICK = {"ranks": 1000, "steps": 1, "seeks": 5}

KIB_PER_GIB = 1024 * 1024


def _usage() -> tuple[float, float, int]:
    """(user CPU s, system CPU s, minor page faults) of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime, usage.ru_minflt


def measure_seeks(ranks: int, steps: int, seeks: int) -> dict[str, Any]:
    """Record ``ranks`` ranks for ``steps`` steps, then time ``seeks`` random seeks (this process)."""
    from timetravel.explore.session import Session
    from timetravel.recording import record_run
    from timetravel.scenarios import get_scenario

    scenario = get_scenario("dp_training")
    config = scenario.resolve_config({"ranks": ranks, "allreduce": "tree", "params": 256, "steps": steps})
    with tempfile.TemporaryDirectory(prefix="timetravel-bench-seek-") as folder:
        path = Path(folder) / "tree.ttr"
        record_s, (report, _world) = timed(lambda: record_run(scenario, config, 0, path))
        rng = random.Random(1)
        open_s, session = timed(lambda: Session.open(path))
        with session:
            end_ns = session.end.t_ns
            seek_ms: list[float] = []
            user_ms: list[float] = []
            system_ms: list[float] = []
            page_faults = 0
            for _ in range(seeks):
                target = rng.randrange(0, end_ns)
                user_before, system_before, faults_before = _usage()
                started = time.perf_counter()
                session.goto(target)
                seek_ms.append((time.perf_counter() - started) * 1000)
                user_after, system_after, faults_after = _usage()
                user_ms.append((user_after - user_before) * 1000)
                system_ms.append((system_after - system_before) * 1000)
                page_faults += faults_after - faults_before
        size = path.stat().st_size
    rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    prefix = f"seek_{ranks}"
    return {
        f"{prefix}_p50_ms": round(statistics.median(seek_ms), 1),
        f"{prefix}_p95_ms": round(percentile(seek_ms, 0.95), 1),
        f"{prefix}_max_ms": round(max(seek_ms), 1),
        f"{prefix}_p95_user_ms": round(percentile(user_ms, 0.95), 1),
        f"{prefix}_p95_system_ms": round(percentile(system_ms, 0.95), 1),
        f"{prefix}_page_faults": page_faults,
        f"{prefix}_open_ms": round(open_s * 1000, 1),
        f"{prefix}_record_s": round(record_s, 2),
        f"{prefix}_recording_bytes": size,
        f"{prefix}_snapshots": report["recording"]["snapshots"],
        f"{prefix}_events": report["events"],
        f"{prefix}_peak_rss_gib": round(rss_kib / KIB_PER_GIB, 3),
    }


def seek_settings(quick: bool) -> tuple[int, int, int]:
    """(ranks, steps, seeks) of the seek workload."""
    if quick:
        return QUICK["ranks"], QUICK["steps"], QUICK["seeks"]
    return SEEK_RANKS, SEEK_STEPS, SEEKS
