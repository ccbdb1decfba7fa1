"""``timetravel fuzz SCENARIO --seeds A:B``: sweep seeds, bucket the failures in a findings database."""

from __future__ import annotations

import argparse
import re
import signal
import sys
from pathlib import Path
from typing import Any

from timetravel.cli.common import (
    UsageError,
    add_database_argument,
    add_json_argument,
    add_seed_sweep_arguments,
    named_scripts,
    print_json,
    require_torch,
)
from timetravel.cli.output import add_force_argument, say
from timetravel.farm import (
    FindingsDatabase,
    LocalPool,
    SweepSummary,
    parse_seeds,
    parse_shard,
    plan_sweep,
    run_sweep,
)
from timetravel.farm.local_pool import WORKERS_MAX
from timetravel.farm.progress import ProgressBar
from timetravel.farm.record import RECORDINGS_FOLDER_DEFAULT, RECORDINGS_PER_SIGNATURE_DEFAULT, RecordOptions
from timetravel.farm.sweep import STOP_INTERRUPTED, STOP_TIME_BUDGET

EXIT_CLEAN = 0
EXIT_FAILURES_FOUND = 1
EXIT_INTERRUPTED = 130
DASK_LOCAL = "local"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fuzz",
        help="run a sweep of seeds on local processes or a Dask cluster; failures go to a findings database",
        description=(
            "Run every seed of --seeds (each without recording) on a local process pool (one worker per CPU), "
            "on a Dask cluster (--dask), or one shard of them (--shard I/N, for array jobs). One row per seed goes "
            "into an SQLite findings database; seeds already there are skipped, so after Ctrl-C the same command "
            "resumes. Scenarios whose `faults` key accepts `swarm` run swarm fault schedules unless you set "
            "`faults` (or pass --no-swarm). Exit code 0 when no seed fails, 1 when some do "
            "(`timetravel findings` lists them), 2 on bad input, 130 when interrupted."
        ),
    )
    add_seed_sweep_arguments(
        parser,
        "seeds A (included) to B (excluded); also N or A:B,C:D",
        "set a config key for every seed (repeatable; applied after any preset)",
    )
    parser.add_argument("--workers", type=int, metavar="N", help="worker processes (default: one per CPU)")
    parser.add_argument(
        "--dask",
        nargs="?",
        const=DASK_LOCAL,
        metavar="ADDRESS",
        help="run on Dask: alone, a LocalCluster of --workers processes; with tcp://host:8786, that scheduler "
        "(needs the `cluster` extra)",
    )
    parser.add_argument("--shard", metavar="I/N", help="run only the seeds s with s %% N == I (0 <= I < N)")
    add_database_argument(parser)
    parser.add_argument(
        "--seed-timeout",
        type=float,
        metavar="S",
        help="wall seconds one seed may take; past it the seed is stopped and recorded as `timeout`",
    )
    parser.add_argument(
        "--time-budget",
        type=float,
        metavar="S",
        help="start no new seed after S wall seconds (rerun to continue)",
    )
    parser.add_argument(
        "--record-failures",
        default=RECORDINGS_FOLDER_DEFAULT,
        metavar="DIR",
        help="after the sweep, record the earliest failing seeds of each signature into DIR/SCENARIO-SEED.ttr, "
        f"each checked to fail the same way (default {RECORDINGS_FOLDER_DEFAULT}/)",
    )
    parser.add_argument(
        "--recordings-per-signature",
        type=int,
        default=RECORDINGS_PER_SIGNATURE_DEFAULT,
        metavar="N",
        help=f"record at most N seeds of each signature (default {RECORDINGS_PER_SIGNATURE_DEFAULT}; 0: none)",
    )
    add_force_argument(parser)
    parser.add_argument("--no-swarm", action="store_true", help="do not turn on swarm fault schedules")
    add_json_argument(parser, "print one JSON summary object on stdout")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    _check_numbers(args)
    if args.scenario == "torch":
        require_torch()  # a torch sweep on a machine without torch stops here, in one line
    plan = plan_sweep(
        args.scenario,
        args.settings,
        parse_seeds(args.seeds),
        parse_shard(args.shard) if args.shard else None,
        scenario_target=args.scenario_target,
        swarm=not args.no_swarm,
        seed_timeout_s=args.seed_timeout,
        scripts_named=named_scripts(args.scenario, args.settings),
    )
    executor = _executor(args)
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        with FindingsDatabase(args.db) as database:
            summary = run_sweep(
                plan,
                database,
                executor,
                time_budget_s=args.time_budget,
                progress=ProgressBar.for_terminal,
                record=RecordOptions(Path(args.record_failures), args.recordings_per_signature, args.force),
                recording_pool=lambda: LocalPool(args.workers),
            )
    finally:
        signal.signal(signal.SIGTERM, previous)
    if summary.stopped == STOP_INTERRUPTED and not summary.ran and not args.json:
        # nothing ran: a summary of zero seeds ("this run: nothing to do") would only mislead
        print(
            f"timetravel: interrupted before any seed finished; {summary.seeds_in_sweep - summary.remaining:,} "
            f"of {summary.seeds_in_sweep:,} seeds are done. Run the same command again to resume.",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    if args.json:
        print_json(summary.to_json())
    else:
        _print_human(summary)
    if summary.stopped == STOP_INTERRUPTED:
        print(
            f"timetravel: interrupted; {summary.seeds_in_sweep - summary.remaining:,} of "
            f"{summary.seeds_in_sweep:,} seeds are done. Run the same command again to resume.",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    return EXIT_FAILURES_FOUND if summary.failing else EXIT_CLEAN


def _interrupt(signal_number: int, frame: Any) -> None:
    """SIGTERM (a batch scheduler's time limit, ``kill``) stops the sweep the way Ctrl-C does."""
    raise KeyboardInterrupt


DASK_ADDRESS = re.compile(r"(tcp|tls|inproc|ucx|ws|wss)://[A-Za-z0-9.\-\[\]:_]+(:[0-9]{1,5})?/?")
"""What ``--dask ADDRESS`` may be: a scheduler address, e.g. tcp://host:8786."""


def _check_numbers(args: argparse.Namespace) -> None:
    """Every option checked before any work starts (a sweep that fails after an hour on a typo is worse)."""
    if args.workers is not None and not 1 <= args.workers <= WORKERS_MAX:
        raise UsageError(f"--workers must be at least 1 and at most {WORKERS_MAX}, got {args.workers}")
    if args.dask is not None and args.dask != DASK_LOCAL and not DASK_ADDRESS.fullmatch(args.dask):
        raise UsageError(f"--dask {args.dask!r} is not a scheduler address (write tcp://host:8786)")
    record_folder = Path(args.record_failures)
    if record_folder.exists() and not record_folder.is_dir():
        raise UsageError(f"--record-failures {record_folder}: not a folder")
    if args.recordings_per_signature < 0:
        raise UsageError(f"--recordings-per-signature must be 0 or more, got {args.recordings_per_signature}")
    for name in ("seed_timeout", "time_budget"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise UsageError(f"--{name.replace('_', '-')} must be a positive number of seconds, got {value}")


def _executor(args: argparse.Namespace) -> Any:
    if args.dask is None:
        return LocalPool(args.workers)
    from timetravel.farm.dask_executor import DaskExecutor

    return DaskExecutor(None if args.dask == DASK_LOCAL else args.dask, args.workers)


def _print_human(summary: SweepSummary) -> None:
    where = f"{summary.workers} {summary.executor} worker{'s' if summary.workers != 1 else ''}"
    shard = f", shard {summary.shard}" if summary.shard != "0/1" else ""
    say(
        f"{summary.scenario}: ran {summary.ran:,} seeds of {summary.seeds}{shard} on {where} in "
        f"{summary.wall_s:.2f} s ({summary.seeds_per_s:,.1f} seeds/s); {summary.already_done:,} were done already"
    )
    if summary.settings:
        say(f"settings: {' '.join('--set ' + setting for setting in summary.settings)}")
    if summary.stopped == STOP_TIME_BUDGET:
        say(f"time budget reached: {summary.remaining:,} seeds left; run the same command to continue")
    outcomes = ", ".join(f"{count:,} {outcome}" for outcome, count in summary.outcomes.items())
    say(f"this run: {outcomes or 'nothing to do'}")
    done = summary.seeds_in_sweep - summary.remaining
    say(f"sweep: {summary.failing:,} of {done:,} seeds fail")
    for signature, count in summary.signatures.items():
        say(f"  {count:>8,}  {signature}")
    if summary.worker_deaths or summary.killed_for_timeout:
        say(
            f"workers: {summary.worker_deaths} died ({summary.retries} seeds retried), "
            f"{summary.killed_for_timeout} killed past --seed-timeout"
        )
    if summary.other_code_rows:
        say(
            f"note: {summary.other_code_rows:,} rows were run by other code; "
            "`timetravel verify --bucket SIG` re-runs a bucket on this code"
        )
    _print_recordings(summary)
    if summary.failing:
        say(f"details: timetravel findings --db {summary.db}")


def _print_recordings(summary: SweepSummary) -> None:
    verified = [entry for entry in summary.recordings if entry["verified"]]
    if verified:
        say(
            f"recorded {len(verified)} failing seed{'s' if len(verified) != 1 else ''}, each checked to fail the same way:"
        )
        for entry in verified:
            say(f"  {entry['path']}  {entry['signature']}")
    for entry in summary.recordings:
        if not entry["verified"]:
            say(f"  seed {entry['seed']}: NOT recorded: {entry['problem']}")
