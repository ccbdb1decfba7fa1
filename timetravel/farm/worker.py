"""The one function every executor runs in its workers: a seed's row, or a seed's recording."""

from __future__ import annotations

from typing import Any

from timetravel.farm.job import SeedJob, resolve, run_seed
from timetravel.farm.record import record_seed
from timetravel.sim.fingerprint import code_fingerprint


def run_job(job: SeedJob) -> dict[str, Any]:
    """``run_seed`` for a sweep's job, ``record_seed`` for a recording job (``job.record_path`` set)."""
    return record_seed(job) if job.record_path is not None else run_seed(job)


def warm_worker(job: SeedJob) -> bool:
    """Import what ``job`` needs (timetravel, its scenario's code and fingerprint) before any seed's
    clock starts: a fresh worker's first seed otherwise pays a second or more of imports on a loaded
    machine against its hard deadline. False when resolving fails: the seed itself then reports why."""
    try:
        scenario, _config_hash = resolve(job.scenario, job.scenario_target, job.settings)
        code_fingerprint(scenario.build.__module__)
    except Exception:  # the seed's own run reports the same error as its row
        return False
    return True
