"""``timetravel verify --bucket SIG``: did my fix fix it? Re-run a bucket's seeds on today's code."""

from __future__ import annotations

import argparse
from typing import Any

from timetravel.cli.common import (
    UsageError,
    add_database_argument,
    add_json_argument,
    add_settings_argument,
    print_json,
)
from timetravel.cli.output import say
from timetravel.farm import (
    FindingsDatabase,
    LocalPool,
    bucket_jobs,
    list_findings,
    verify_bucket,
)
from timetravel.farm.findings import find_bucket
from timetravel.farm.progress import ProgressBar
from timetravel.farm.verify import BucketNotFoundError, Verification
from timetravel.scenarios import load_target

EXIT_ALL_FIXED = 0
EXIT_STILL_FAILING = 1
SEEDS_MAX_DEFAULT = 10_000


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "verify",
        help="re-run a findings bucket's seeds on today's code: fixed / still failing / new signature",
        description=(
            "Re-run every seed of the bucket SIG (a signature from `timetravel findings`, or a unique prefix) with "
            "the settings its sweep used, on the code checked out now, and report which seeds are fixed, still "
            "fail with SIG, or fail with a new signature. The database is only read. Exit code 0 when every seed "
            "passes, 1 otherwise, 2 on bad input."
        ),
    )
    parser.add_argument(
        "--bucket", required=True, metavar="SIG", help="the signature of the bucket to re-run"
    )
    add_database_argument(parser)
    parser.add_argument(
        "--scenario",
        metavar="NAME|MODULE:ATTR",
        help="the scenario, when SIG occurs in several; MODULE:ATTR also loads its code from there (a scenario "
        "neither built in nor installed needs it: the module a database names is never imported)",
    )
    parser.add_argument("--workers", type=int, metavar="N", help="worker processes (default: one per CPU)")
    parser.add_argument("--seed-timeout", type=float, metavar="S", help="wall seconds one seed may take")
    parser.add_argument(
        "--seeds-max",
        type=int,
        default=SEEDS_MAX_DEFAULT,
        metavar="N",
        help=f"re-run at most N seeds, the lowest first (default {SEEDS_MAX_DEFAULT:,})",
    )
    add_settings_argument(
        parser,
        "re-run with this config key changed (repeatable): prove a fix that is a setting "
        "(launch=posix_spawn, bug=none) on every seed of the bucket",
    )
    parser.add_argument(
        "--script",
        metavar="PATH",
        help="a torch bucket: the training script to run (your fixed version, say); a database never names "
        "code to run, so a torch bucket needs it",
    )
    add_json_argument(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    if args.seeds_max < 1:
        raise UsageError(f"--seeds-max must be at least 1, got {args.seeds_max}")
    if args.seed_timeout is not None and not args.seed_timeout > 0:
        raise UsageError(f"--seed-timeout must be a positive number of seconds, got {args.seed_timeout}")
    scenario_target = args.scenario if args.scenario and ":" in args.scenario else None
    scenario_name = load_target(scenario_target).name if scenario_target else args.scenario
    with FindingsDatabase(args.db, create=False) as database:
        buckets = find_bucket(list_findings(database), args.bucket)
        if scenario_name:
            buckets = [bucket for bucket in buckets if bucket.scenario == scenario_name]
        if len(buckets) != 1:
            known = ", ".join(f"{bucket.signature} ({bucket.scenario})" for bucket in buckets)
            raise BucketNotFoundError(
                f"no bucket {args.bucket!r} in {args.db}"
                if not buckets
                else f"{args.bucket!r} names {len(buckets)} buckets: {known} (give the full signature or --scenario)"
            )
        bucket = buckets[0]
        jobs = bucket_jobs(
            database,
            bucket.scenario,
            bucket.signature,
            args.seed_timeout,
            args.seeds_max,
            scenario_target,
            keys_set={setting.partition("=")[0] for setting in args.settings},
        )
    if bucket.scenario == "torch":
        jobs = _with_script(jobs, args.script)
    if args.settings:
        jobs = _with_settings(jobs, args.settings)
    progress = ProgressBar.for_terminal(len(jobs), f"verify {bucket.scenario}")
    result = verify_bucket(jobs, bucket.scenario, bucket.signature, LocalPool(args.workers), progress)
    if args.json:
        print_json(result.to_json())
    else:
        _print_human(result)
    return EXIT_ALL_FIXED if result.fixed == result.seeds else EXIT_STILL_FAILING


def _with_script(jobs: list[Any], script: str | None) -> list[Any]:
    """The bucket's torch jobs running the script the user named (never the one the database names)."""
    import dataclasses

    from timetravel.farm.job import config_hash
    from timetravel.scenarios import get_scenario

    if not script:
        raise UsageError(
            "this bucket runs a torch script: pass --script PATH (a database never names code to run)"
        )
    scenario = get_scenario("torch")
    named = []
    for job in jobs:
        settings = (
            *(setting for setting in job.settings if not setting.startswith("script=")),
            f"script={script}",
        )
        digest = config_hash(scenario.resolve_config(settings))
        named.append(dataclasses.replace(job, settings=settings, config_hash=digest, scripts_named=(script,)))
    return named


def _with_settings(jobs: list[Any], settings: list[str]) -> list[Any]:
    """The bucket's jobs with ``--set`` keys applied after the sweep's own (checked before any run)."""
    import dataclasses

    from timetravel.farm.job import config_hash, resolve

    changed = []
    for job in jobs:
        merged = (*job.settings, *settings)
        scenario, _digest = resolve(job.scenario, job.scenario_target, tuple(job.settings))
        digest = config_hash(scenario.resolve_config(merged))
        changed.append(dataclasses.replace(job, settings=merged, config_hash=digest))
    return changed


def _print_human(result: Verification) -> None:
    say(f"{result.signature} ({result.scenario}): {result.seeds:,} seeds re-run on today's code")
    for verdict, label in (
        ("fixed", "fixed"),
        ("still_failing", "still failing"),
        ("new_signature", "new signature"),
    ):
        seeds = result.seeds_by_verdict[verdict]
        listed = " ".join(str(seed) for seed in seeds[:12]) + (
            " ..." if getattr(result, verdict) > 12 else ""
        )
        say(f"  {label:<14} {getattr(result, verdict):>6,}  {listed}".rstrip())
    for signature, count in result.new_signatures.items():
        say(f"    {count:,} now fail with {signature}")
