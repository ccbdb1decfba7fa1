"""The one function every executor runs in its workers: a seed's row, or a seed's recording."""

from __future__ import annotations

from typing import Any

from timetravel.farm.job import SeedJob, run_seed
from timetravel.farm.record import record_seed


def run_job(job: SeedJob) -> dict[str, Any]:
    """``run_seed`` for a sweep's job, ``record_seed`` for a recording job (``job.record_path`` set)."""
    return record_seed(job) if job.record_path is not None else run_seed(job)
