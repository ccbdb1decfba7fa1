"""``verify --bucket SIG``: re-run a bucket's seeds on today's code and say what became of each.

Each seed is run again with the settings its sweep recorded, on the code checked out now: it is
*fixed* (passes), *still failing* (same signature) or fails with a *new signature* (the fix moved
the bug, or uncovered another). The database is only read; a fixed bucket leaves history alone,
and a fresh sweep into a new file is what a CI gate compares against (``findings --baseline``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from timetravel.farm.database import FindingsDatabase, Sweep
from timetravel.farm.executor import Executor
from timetravel.farm.job import SeedJob, config_hash
from timetravel.farm.sweep import load_scenario
from timetravel.sim.fingerprint import code_fingerprint

SEEDS_LISTED_MAX = 50
VERDICTS = ("fixed", "still_failing", "new_signature")


class BucketNotFoundError(LookupError):
    """No bucket has that signature (or the prefix names several); the message lists candidates."""


@dataclass
class Verification:
    scenario: str
    signature: str
    seeds: int
    fixed: int = 0
    still_failing: int = 0
    new_signature: int = 0
    new_signatures: dict[str, int] = field(default_factory=dict)
    seeds_by_verdict: dict[str, list[int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def bucket_jobs(
    database: FindingsDatabase, scenario: str, signature: str, seed_timeout_s: float | None, seeds_max: int
) -> list[SeedJob]:
    """Today's jobs for the bucket's seeds (the earliest seeds first when there are more than ``seeds_max``)."""
    sweeps = database.sweeps()
    rows = database.connection.execute(
        "SELECT config_hash, seed FROM seeds WHERE scenario = ? AND signature = ? ORDER BY seed LIMIT ?",
        (scenario, signature, seeds_max),
    ).fetchall()
    jobs = []
    for old_hash, seed in rows:
        sweep = sweeps.get((scenario, old_hash))
        if sweep is None:
            raise BucketNotFoundError(f"the database lacks the settings of config {old_hash[:12]}")
        jobs.append(_job_today(sweep, seed, seed_timeout_s))
    return jobs


def _job_today(sweep: Sweep, seed: int, seed_timeout_s: float | None) -> SeedJob:
    scenario = load_scenario(sweep.scenario, sweep.scenario_target)
    config = scenario.resolve_config(sweep.settings)
    return SeedJob(
        scenario=sweep.scenario,
        settings=sweep.settings,
        config_hash=config_hash(config),
        seed=seed,
        code_fingerprint=code_fingerprint(scenario.build.__module__),
        scenario_target=sweep.scenario_target,
        seed_timeout_s=seed_timeout_s,
    )


def verify_bucket(
    jobs: list[SeedJob], scenario: str, signature: str, executor: Executor, progress: Any = None
) -> Verification:
    """Run the jobs and sort each seed into fixed / still failing / new signature."""
    result = Verification(scenario, signature, len(jobs))
    by_verdict: dict[str, list[int]] = {verdict: [] for verdict in VERDICTS}
    new_signatures: Counter[str] = Counter()
    try:
        for done, row in enumerate(executor.run(iter(jobs), lambda: False), start=1):
            if row["signature"] is None:
                verdict = "fixed"
            elif row["signature"] == signature:
                verdict = "still_failing"
            else:
                verdict = "new_signature"
                new_signatures[row["signature"]] += 1
            by_verdict[verdict].append(row["seed"])
            if progress is not None:
                progress.update(done, len(by_verdict["still_failing"]) + len(by_verdict["new_signature"]))
    finally:
        executor.close()
        if progress is not None:
            progress.finish()
    for verdict, seeds in by_verdict.items():
        setattr(result, verdict, len(seeds))
        result.seeds_by_verdict[verdict] = sorted(seeds)[:SEEDS_LISTED_MAX]
    result.new_signatures = dict(new_signatures.most_common())
    return result
