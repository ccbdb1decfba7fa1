"""Recording failing seeds: after a sweep, re-run the earliest failures of each signature with recording.

Seeds run without recording (recording costs time and disk on every seed, and most seeds pass).
When the sweep is done, the earliest-failing seeds of each signature (at most
``per_signature`` of them, earliest failure time first: the least to replay) are run again with
recording into ``<folder>/<scenario>-<seed>.ttr`` — by the worker processes of this machine, so
the files land next to the findings database even when the sweep ran on a Dask cluster. A
worker records into ``<name>.partial`` and renames it when complete and checked, so an
interrupted recording never looks like a finished one. A file that exists at ``<name>`` is not
replaced unless the sweep was started with ``--force`` (recording/replace.py): the seed is then
reported as not recorded, naming the file.

Each recording is then *checked*: the file is read back and its END frame must carry the same
failure signature and the same final state hash as the seed's row. A recording that differs from
the unrecorded run would be a determinism bug; it is reported and left out of the database.
Only ``fail`` rows are recorded: a timeout would record a run with no end, a crash kills the
recorder, an error never built a world. The database keeps each row's recording path, which is
how a resumed sweep knows what it already recorded.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from timetravel.farm.database import FindingsDatabase
from timetravel.farm.executor import Executor
from timetravel.farm.job import MESSAGE_CHARS_MAX, SeedJob, job_launch, resolve
from timetravel.recording import RecordingReader, default_recording_path, record_run
from timetravel.recording.files import partial_path, rename_over
from timetravel.recording.replace import check_replaceable, in_progress

RECORDINGS_FOLDER_DEFAULT = "recordings"
RECORDINGS_PER_SIGNATURE_DEFAULT = 5


@dataclass(frozen=True)
class RecordOptions:
    folder: Path = Path(RECORDINGS_FOLDER_DEFAULT)
    per_signature: int = RECORDINGS_PER_SIGNATURE_DEFAULT
    force: bool = False
    """Record over files that exist (``fuzz --force``); without it such a seed is not recorded."""


def record_seed(job: SeedJob) -> dict[str, Any]:
    """In a worker: record the job's seed into ``job.record_path`` and read back what the file says."""
    assert job.record_path is not None
    scenario, _ = resolve(job.scenario, job.scenario_target, job.settings)
    config = scenario.resolve_config(job.settings)
    final = Path(job.record_path)
    partial = partial_path(final)
    started = time.perf_counter()
    result: dict[str, Any] = {
        "recording": str(final),
        "seed": job.seed,
        "signature": None,
        "state_hash": None,
    }
    try:
        check_replaceable(final, force=job.record_force)
        if not in_progress(partial):
            partial.unlink(missing_ok=True)  # what a killed worker left
        record_run(scenario, config, job.seed, partial, launch=job_launch(job))
        with RecordingReader.open(partial) as reader:
            end = reader.end() or {}
        failure = end.get("failure") or {}
        result.update(signature=failure.get("signature"), state_hash=end.get("state_hash"))
        check_replaceable(final, force=job.record_force)  # nobody wrote it meanwhile
        rename_over(partial, final)
        result["bytes"] = final.stat().st_size
    except Exception as error:
        partial.unlink(missing_ok=True)
        result["error"] = f"{type(error).__name__}: {error}"[:MESSAGE_CHARS_MAX]
    result["wall_s"] = round(time.perf_counter() - started, 6)
    return result


def recording_jobs(
    database: FindingsDatabase,
    jobs_for: Callable[[int, str], SeedJob],
    where: str,
    parameters: tuple[Any, ...],
    options: RecordOptions,
) -> list[SeedJob]:
    """The failing seeds to record: per signature, the earliest ones, up to ``per_signature`` recorded.

    ``where`` selects the sweep's rows (scenario, config, seeds, shard); ``jobs_for(seed, path)``
    makes the job.
    """
    if options.per_signature <= 0:
        return []
    connection = database.connection
    recorded = dict(
        connection.execute(
            f"SELECT signature, count(*) FROM seeds WHERE {where} AND recording IS NOT NULL GROUP BY signature",
            parameters,
        ).fetchall()
    )
    taken: dict[str, int] = {}
    jobs = []
    for signature, scenario, config, seed in connection.execute(
        f"SELECT signature, scenario, config_hash, seed FROM seeds WHERE {where} AND outcome = 'fail' "
        "AND recording IS NULL ORDER BY signature, t_ns, events, seed",
        parameters,
    ).fetchall():
        if recorded.get(signature, 0) + taken.get(signature, 0) >= options.per_signature:
            continue
        taken[signature] = taken.get(signature, 0) + 1
        jobs.append(jobs_for(seed, str(_recording_path(database, options.folder, scenario, config, seed))))
    return jobs


def _recording_path(database: FindingsDatabase, folder: Path, scenario: str, config: str, seed: int) -> Path:
    """``<scenario>-<seed>.ttr``, or with the config's hash when another config's row holds that name."""
    path = default_recording_path(scenario, seed, folder)
    taken = database.connection.execute(
        "SELECT 1 FROM seeds WHERE recording = ? AND config_hash != ? LIMIT 1", (str(path), config)
    ).fetchone()
    if taken is None:
        return path
    return path.with_name(f"{scenario}-{seed}-{config[:12]}{path.suffix}")


def check_recording(row: dict[str, Any], result: dict[str, Any]) -> str | None:
    """Why a recording cannot stand for its row (None: it fails the same way and ends the same)."""
    if "outcome" in result:  # the executor gave up on the job: a row of kind timeout or crash
        return f"the recording run ended as {result['outcome']}: {result['failure_message']}"
    if result.get("error"):
        return f"recording failed: {result['error']}"
    if result["signature"] != row["signature"]:
        return f"the recording fails with {result['signature']}, the sweep's run with {row['signature']}"
    if result["state_hash"] != row["state_hash"]:
        return (
            f"the recording ends in state {result['state_hash']}, the sweep's run in {row['state_hash']}: "
            "recording changed the run (a determinism bug)"
        )
    return None


def record_failures(
    database: FindingsDatabase,
    jobs: list[SeedJob],
    executor: Executor,
    stop: Callable[[], bool],
    progress: Any = None,
) -> Iterator[dict[str, Any]]:
    """Run the recording jobs; yield one entry per seed and keep each verified path in the database."""
    by_seed = {job.seed: job for job in jobs}
    problems = 0
    for done, result in enumerate(executor.run(iter(jobs), stop), start=1):
        job = by_seed[result["seed"]]
        [row] = database.rows(
            "WHERE scenario = ? AND config_hash = ? AND seed = ?", (job.scenario, job.config_hash, job.seed)
        )
        problem = check_recording(row, result)
        if problem is None:
            database.set_recording(job.scenario, job.config_hash, job.seed, str(job.record_path))
        problems += problem is not None
        if progress is not None:
            progress.update(done, problems)
        yield {
            "seed": job.seed,
            "signature": row["signature"],
            "path": job.record_path if problem is None else None,
            "verified": problem is None,
            "problem": problem,
        }
