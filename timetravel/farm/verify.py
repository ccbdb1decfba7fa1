"""``verify --bucket SIG``: re-run a bucket's seeds on today's code and say what became of each.

Each seed is run again with the settings its sweep recorded, on the code checked out now: it is
*fixed* (passes), *still failing* (same signature) or fails with a *new signature* (the fix moved
the bug, or uncovered another). The database is only read; a fixed bucket leaves history alone,
and a fresh sweep into a new file is what a CI gate compares against (``findings --baseline``).

**A database is untrusted input.** A sweep records the ``--scenario MODULE:ATTR`` it was run with,
but a database can come from anyone, so that stored value is only shown, never imported: the
scenario loads by its registered name, or from the ``scenario_target`` the user passes now (and
then only that one). Nor may a stored setting make us read a file: a ``@FILE`` value from the
database is refused (``/dev/zero`` once exhausted 3.8 GB), unless the user sets that key with
``--set`` now, which leaves the stored one out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from typing import Any

from timetravel.farm.database import FindingsDatabase, Sweep
from timetravel.farm.executor import Executor
from timetravel.farm.job import SeedJob, config_hash
from timetravel.scenarios import UnknownScenarioError, get_scenario, load_target
from timetravel.sim.fingerprint import code_fingerprint
from timetravel.sim.scenario import Scenario

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
    database: FindingsDatabase,
    scenario: str,
    signature: str,
    seed_timeout_s: float | None,
    seeds_max: int,
    scenario_target: str | None = None,
    keys_set: Collection[str] = (),
) -> list[SeedJob]:
    """Today's jobs for the bucket's seeds (the earliest seeds first when there are more than ``seeds_max``).

    ``scenario_target``: the user's ``--scenario MODULE:ATTR``; the database's own is never imported.
    ``keys_set``: the keys the user sets with ``--set`` (a stored setting of one of them that names
    a file is left out rather than refused)."""
    sweeps = database.sweeps()
    loaded: dict[str, Scenario] = {}
    rows = database.connection.execute(
        "SELECT config_hash, seed FROM seeds WHERE scenario = ? AND signature = ? ORDER BY seed LIMIT ?",
        (scenario, signature, seeds_max),
    ).fetchall()
    jobs = []
    for old_hash, seed in rows:
        sweep = sweeps.get((scenario, old_hash))
        if sweep is None:
            raise BucketNotFoundError(f"the database lacks the settings of config {old_hash[:12]}")
        if sweep.scenario not in loaded:
            loaded[sweep.scenario] = trusted_scenario(sweep, scenario_target)
        jobs.append(
            _job_today(sweep, loaded[sweep.scenario], seed, seed_timeout_s, scenario_target, keys_set)
        )
    return jobs


def trusted_scenario(sweep: Sweep, scenario_target: str | None) -> Scenario:
    """The sweep's scenario from the user's target, else by registered name (never the stored target)."""
    if scenario_target:
        scenario = load_target(scenario_target)
        if scenario.name != sweep.scenario:
            raise UnknownScenarioError(
                f"{scenario_target} is scenario {scenario.name!r}; the bucket is of {sweep.scenario!r}"
            )
        return scenario
    try:
        return get_scenario(sweep.scenario)
    except UnknownScenarioError:
        stored = f" (the database says it came from {sweep.scenario_target!r}, which is not imported automatically)"
        raise UnknownScenarioError(
            f"scenario {sweep.scenario!r} is neither built in nor installed; pass --scenario MODULE:ATTR to "
            f"load its code{stored if sweep.scenario_target else ''}"
        ) from None


def stored_settings(sweep: Sweep, scenario: Scenario, keys_set: Collection[str]) -> tuple[str, ...]:
    """The sweep's settings without those that name a file and that the user sets anew (the
    rest are resolved with files refused: ``resolve_config(..., files=False)``)."""
    kept = []
    for setting in sweep.settings:
        key, _, text = setting.partition("=")
        if key in keys_set and scenario.param(key).names_file(text):
            continue
        kept.append(setting)
    return tuple(kept)


def _job_today(
    sweep: Sweep,
    scenario: Scenario,
    seed: int,
    seed_timeout_s: float | None,
    scenario_target: str | None,
    keys_set: Collection[str],
) -> SeedJob:
    settings = stored_settings(sweep, scenario, keys_set)
    config = scenario.resolve_config(settings, files=False)
    return SeedJob(
        scenario=sweep.scenario,
        settings=settings,
        config_hash=config_hash(config),
        seed=seed,
        code_fingerprint=code_fingerprint(scenario.build.__module__),
        scenario_target=scenario_target,
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
