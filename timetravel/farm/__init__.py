"""The simulation farm: seed sweeps on local processes, on a Dask cluster, or in shards.

``plan_sweep`` resolves a scenario, its config and a seed set; ``run_sweep`` runs the seeds the
findings database lacks on an executor (``LocalPool`` by default, ``DaskExecutor`` when asked,
which is the only code that imports dask) and commits one row per seed; ``list_findings``
buckets the failing seeds by signature; ``verify_bucket`` re-runs a bucket on today's code.
Every executor runs the same ``run_seed``, so the same seeds give the same rows everywhere.
"""

from timetravel.farm.database import DEFAULT_DATABASE, FindingsDatabase, FindingsDatabaseError, Sweep
from timetravel.farm.executor import Executor, FarmWorkerError
from timetravel.farm.findings import Findings, compare_to_baseline, list_findings
from timetravel.farm.job import ROW_FIELDS, VOLATILE_FIELDS, SeedJob, comparable, run_seed
from timetravel.farm.local_pool import LocalPool, default_workers
from timetravel.farm.record import RecordOptions
from timetravel.farm.seeds import SeedSet, SeedSpecError, Shard, parse_seeds, parse_shard
from timetravel.farm.sweep import SweepPlan, SweepSummary, plan_sweep, run_sweep, supports_swarm
from timetravel.farm.verify import Verification, bucket_jobs, verify_bucket

__all__ = [
    "DEFAULT_DATABASE",
    "ROW_FIELDS",
    "VOLATILE_FIELDS",
    "Executor",
    "FarmWorkerError",
    "Findings",
    "FindingsDatabase",
    "FindingsDatabaseError",
    "LocalPool",
    "RecordOptions",
    "SeedJob",
    "SeedSet",
    "SeedSpecError",
    "Shard",
    "Sweep",
    "SweepPlan",
    "SweepSummary",
    "Verification",
    "bucket_jobs",
    "comparable",
    "compare_to_baseline",
    "default_workers",
    "list_findings",
    "parse_seeds",
    "parse_shard",
    "plan_sweep",
    "run_seed",
    "run_sweep",
    "supports_swarm",
    "verify_bucket",
]
