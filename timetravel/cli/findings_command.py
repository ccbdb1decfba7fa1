"""``timetravel findings``: failing seeds bucketed by signature; ``findings merge`` joins shard databases."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from timetravel.cli.common import UsageError, add_database_argument, add_json_argument, print_json
from timetravel.cli.output import say
from timetravel.farm import (
    FindingsDatabase,
    compare_to_baseline,
    list_findings,
)
from timetravel.farm.findings import BaselineComparison, Bucket, Findings
from timetravel.sim.timefmt import format_time_auto

EXIT_OK = 0
EXIT_NEW_SIGNATURE = 1
EXIT_MERGE_CONFLICTS = 1
MERGE_INPUTS_MAX = 10_000
FAULT_KINDS_SHOWN_MAX = 6
SEEDS_SHOWN_MAX = 12
OPENERS = (
    ("timetravel.cli.tui_command", "tui"),
    ("timetravel.cli.shell_command", "shell"),
    ("timetravel.cli.inspect_command", "inspect"),
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "findings",
        help="list the failing seeds of a sweep by signature; `findings merge` joins shard databases",
        description=(
            "`timetravel findings [--db PATH]` lists buckets of failing seeds by signature: how many, the fault "
            "kinds present with each, the earliest-failing seed and the command that opens it. With --baseline "
            "OLD.db the exit code is 1 when a signature appears that OLD.db lacks (a CI gate). "
            "`timetravel findings merge A.db B.db ... --db OUT.db` merges shard databases into OUT.db; a seed "
            "whose rows disagree is a conflict (exit code 1)."
        ),
    )
    parser.add_argument(
        "words",
        nargs="*",
        metavar="merge INPUT.db",
        help="`merge` followed by the databases to merge into --db",
    )
    add_database_argument(parser)
    parser.add_argument(
        "--baseline", metavar="OLD.db", help="exit 1 when a signature appears that OLD.db lacks"
    )
    add_json_argument(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if args.words:
        if args.words[0] != "merge":
            raise UsageError(f"findings: unknown action {args.words[0]!r} (the one action is `merge`)")
        return _merge(args, args.words[1:])
    with FindingsDatabase(args.db, create=False) as database:
        findings = list_findings(database, opener())
    comparison = None
    if args.baseline:
        with FindingsDatabase(args.baseline, create=False) as baseline:
            comparison = compare_to_baseline(findings, list_findings(baseline, opener()))
    if args.json:
        result = findings.to_json()
        if comparison is not None:
            result["baseline"] = comparison.__dict__
        print_json(result)
    else:
        _print_findings(findings)
        if comparison is not None:
            _print_comparison(comparison)
    return EXIT_NEW_SIGNATURE if comparison is not None and comparison.new else EXIT_OK


def opener() -> str:
    """The command that opens a recording: the TUI when installed, else the shell, else ``inspect``."""
    from timetravel.cli import COMMAND_MODULES

    for module, command in OPENERS:
        if module in COMMAND_MODULES:
            return command
    return "inspect"


def _merge(args: argparse.Namespace, inputs: list[str]) -> int:
    if not inputs:
        raise UsageError("findings merge: name the databases to merge (findings merge A.db B.db --db OUT.db)")
    if len(inputs) > MERGE_INPUTS_MAX:
        raise UsageError(f"findings merge: at most {MERGE_INPUTS_MAX} inputs")
    for path in inputs:  # every input is checked before OUT is touched
        FindingsDatabase(path, create=False).close()
    results = []
    with FindingsDatabase(args.db) as out:
        for path in inputs:
            merged = out.merge_from(path)
            results.append({"input": path, **merged.__dict__})
        total = out.count()
    conflicts = sum(result["conflicts_total"] for result in results)
    if args.json:
        print_json({"db": args.db, "seeds": total, "inputs": results, "conflicts": conflicts})
    else:
        for result in results:
            say(
                f"{result['input']}: {result['inserted']:,} rows added, {result['duplicates']:,} already present, "
                f"{result['conflicts_total']:,} conflicts"
            )
            if result["other_code"]:
                say(
                    f"  {result['other_code']:,} of the rows already present were run by other code "
                    f"({result['other_code_changed']:,} with other results); the rows kept are the first ones"
                )
            for target in result["scenario_targets"]:
                say(
                    f"  its sweeps name scenario code {target!r}: kept as data, never imported "
                    "(verify imports only a --scenario MODULE:ATTR you pass)"
                )
            for conflict in result["conflicts"]:
                differs = ", ".join(
                    f"{column} {kept} vs {other}" for column, (kept, other) in conflict["differs"].items()
                )
                say(f"  conflict: {conflict['scenario']} seed {conflict['seed']}: {differs}")
        say(f"{args.db}: {total:,} seeds")
    if conflicts:
        say(
            f"timetravel: {conflicts} seeds have rows from the same code that disagree (a determinism bug, or "
            "another platform)",
            file=sys.stderr,
        )
        return EXIT_MERGE_CONFLICTS
    return EXIT_OK


def _print_findings(findings: Findings) -> None:
    scenarios = ", ".join(f"{name} {count:,}" for name, count in findings.scenarios.items())
    signatures = len(findings.buckets)
    say(
        f"{findings.db}: {findings.seeds:,} seeds ({scenarios or 'none'}), {findings.failing:,} failing, "
        f"{signatures} signature{'s' if signatures != 1 else ''}"
    )
    for bucket in findings.buckets:
        _print_bucket(bucket)


def _print_bucket(bucket: Bucket) -> None:
    say(
        "",
        f"{bucket.signature}  ({bucket.scenario})  {bucket.count:,} seeds, {bucket.share:.1%} of its seeds",
    )
    if bucket.fault_kinds:
        say(f"  {'fault kinds':<12} {'in bucket':>9}  {'all seeds':>9}")
        for kind, stats in list(bucket.fault_kinds.items())[:FAULT_KINDS_SHOWN_MAX]:
            say(f"    {kind:<10} {stats['share']:>9.0%}  {stats['share_all']:>9.0%}")
    else:
        say("  fault kinds  none")
    earliest = bucket.earliest
    when = ""
    if earliest["t_ns"] is not None:
        when = f", fails at {format_time_auto(earliest['t_ns'])}"
        when += f" after {earliest['events']:,} events" if earliest["events"] is not None else ""
    say(f"  earliest     seed {earliest['seed']}{when}")
    say(f"  open         {bucket.open_command}")
    if bucket.open_command != bucket.reproduce_command:
        say(f"  reproduce    {bucket.reproduce_command}")
    if bucket.scenario_target:
        say(
            f"  untrusted    the database says its scenario code is {bucket.scenario_target!r}: check that "
            "module before you add --scenario MODULE:ATTR to these commands (that imports it)"
        )
    for script in bucket.scripts:
        say(
            f"  untrusted    the database says the sweep ran the script {script!r}: the commands say "
            "script=SCRIPT; replace it with the script you mean to run (a database never names code to run)"
        )
    shown = " ".join(str(seed) for seed in bucket.seeds[:SEEDS_SHOWN_MAX])
    more = " ..." if bucket.count > SEEDS_SHOWN_MAX else ""
    say(f"  seeds        {shown}{more}")


def _print_comparison(comparison: BaselineComparison) -> None:
    say(
        "",
        f"against baseline {comparison.baseline}: {len(comparison.new)} new, {len(comparison.gone)} gone, "
        f"{comparison.kept} in both",
    )
    for bucket in comparison.new:
        say(
            f"  NEW   {bucket['signature']} ({bucket['scenario']}, {bucket['count']:,} seeds): {bucket['open_command']}"
        )
    for bucket in comparison.gone:
        say(f"  gone  {bucket['signature']} ({bucket['scenario']})")
