"""``timetravel run SCENARIO``: run one seed and report its outcome."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from timetravel.cli.common import (
    UsageError,
    add_determinism_argument,
    add_json_argument,
    add_scenario_arguments,
    add_scenario_module_argument,
    bounded_int,
    chosen_seed,
    launch_for,
    print_json,
    resolve_scenario,
)
from timetravel.cli.output import add_force_argument, add_record_budget_argument
from timetravel.recording.files import check_output_path
from timetravel.sim.launch import Launch
from timetravel.sim.runner import reproduce_command, run_report
from timetravel.sim.timefmt import format_time_auto, parse_time

EXIT_PASS = 0
EXIT_SIMULATED_FAILURE = 1


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run one seed of a scenario and report its outcome",
        description=(
            "Run one seed of a scenario to the end (or --until T). Exit code 0 when it passes, 1 when the "
            "simulated system fails (the failure and the command that reproduces it are printed), 2 on bad input."
        ),
    )
    add_scenario_arguments(parser)
    parser.add_argument(
        "--until", metavar="T", help="stop after every event with time <= T (950, 950ms, 1.5s, 120us)"
    )
    add_scenario_module_argument(parser)
    add_determinism_argument(parser)
    parser.add_argument(
        "--record",
        nargs="?",
        const="",
        metavar="PATH.ttr",
        help="record the run for replay, inspect and the debugger (default path recordings/SCENARIO-SEED.ttr)",
    )
    parser.add_argument(
        "--snapshot-every",
        type=bounded_int(1, 2**40),
        metavar="N",
        help="with --record: a snapshot every N events (default 8192: seeks within 100 ms on gossip)",
    )
    add_force_argument(parser)
    add_record_budget_argument(parser)
    parser.add_argument(
        "--record-choices",
        action="store_true",
        help="with --record: also log every choice drawn (for reruns on changed code; slower)",
    )
    add_json_argument(parser, "print exactly one JSON object")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    scenario = resolve_scenario(args.scenario, args.scenario_target)
    launch = launch_for(scenario.name, args.settings)
    config = scenario.resolve_config(args.settings)
    args.seed = chosen_seed(args, scenario, config)
    until_ns = parse_time(args.until, scenario.display_unit) if args.until else None
    started = time.perf_counter()
    if args.record is not None:
        report = _record(args, scenario, config, until_ns, launch)
    else:
        report, _world = run_report(
            scenario, config, args.seed, until_ns=until_ns, determinism=args.determinism, launch=launch
        )
    report["wall_s"] = round(time.perf_counter() - started, 6)
    command = reproduce_command(
        scenario.name, args.seed, args.settings, args.until, args.scenario_target, args.determinism
    )
    return print_outcome(report, command, as_json=args.json)


def print_outcome(report: dict[str, Any], command: str, *, as_json: bool) -> int:
    """Print a run's report (one JSON object, or the human summary) and, for a failure, the command
    that reproduces it (on stderr under --json); returns the exit code. Shared with torchrun."""
    if as_json:
        print_json(report)
    else:
        _print_human(report)
    if report["outcome"] == "fail":
        print(f"reproduce: {command}", file=sys.stderr if as_json else sys.stdout)
        return EXIT_SIMULATED_FAILURE
    return EXIT_PASS


def _record(
    args: argparse.Namespace, scenario: Any, config: dict[str, Any], until_ns: int | None, launch: Launch
) -> dict[str, Any]:
    from timetravel.recording import (
        SNAPSHOT_EVERY_EVENTS_DEFAULT,
        RecordingError,
        default_recording_path,
        record_run,
    )

    path = args.record or default_recording_path(scenario.name, args.seed)
    check_output_path(path)
    interval = args.snapshot_every or scenario.snapshot_every_events or SNAPSHOT_EVERY_EVENTS_DEFAULT
    try:
        report, _world = record_run(
            scenario,
            config,
            args.seed,
            path,
            until_ns=until_ns,
            snapshot_every_events=interval,
            record_choices=args.record_choices,
            determinism=args.determinism,
            force=args.force,
            launch=launch,
            max_record_bytes=args.max_record_bytes,
        )
    except (ValueError, RecordingError) as error:
        raise UsageError(str(error)) from None
    return report


def _print_human(report: dict[str, Any]) -> None:
    print(
        f"{report['scenario']} seed {report['seed']}: {report['events']:,} events, "
        f"simulated {format_time_auto(report['t_end_ns'])} in {report['wall_s']:.2f} s wall"
    )
    failure = report["failure"]
    if failure is None:
        print("outcome: pass")
    else:
        print(f"outcome: FAIL  {failure['kind']} on {failure['node']} at {format_time_auto(failure['t_ns'])}")
        print(f"  {failure['message']}")
        print(f"  signature {failure['signature']}")
        for line in flight_recorder_lines(failure.get("flight_recorder")):
            print(f"  {line}")
        if failure["kind"] == "internal":  # the simulator's own traceback: what its developers need
            for line in str(failure.get("traceback", "")).rstrip().splitlines():
                print(f"  | {line}")
    for key, value in report.get("summary", {}).items():
        print(f"  {key}: {value}")
    print(f"state_hash {report['state_hash']}  hash_chain {report['hash_chain']}")
    recording = report.get("recording")
    if recording is not None:
        print(
            f"recorded {recording['path']}: {recording['bytes']:,} bytes, {recording['snapshots']} snapshots "
            f"(every {recording['snapshot_every_events']:,} events)"
        )
        for note in recording["notes"]:
            print(f"  warning: {note}")


FLIGHT_RECORDER_COLUMNS = (
    ("rank", "rank"),
    ("last_entered", "last entered"),
    ("last_completed", "last completed"),
    ("status", "status"),
    ("waits_on", "waits on"),
)


def flight_recorder_lines(rows: Any) -> list[str]:
    """A hang's flight recorder as a table: per rank its last collective entered and completed, its
    status and whom it waits on (the failure's ``flight_recorder``; every field is in ``--json``)."""
    if not isinstance(rows, list) or not rows:
        return []
    cells = [
        [_cell(row.get(key)) if isinstance(row, dict) else "" for key, _title in FLIGHT_RECORDER_COLUMNS]
        for row in rows
    ]
    titles = [title for _key, title in FLIGHT_RECORDER_COLUMNS]
    widths = [max(len(text) for text in column) for column in zip(titles, *cells, strict=True)]
    lines = ["flight recorder (per rank: its last collectives, as NCCL's recorder keeps them):"]
    for values in (titles, *cells):
        lines.append(
            "  " + "  ".join(text.ljust(width) for text, width in zip(values, widths, strict=True)).rstrip()
        )
    return lines


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, list):
        return ", ".join(str(item) for item in value) or "-"
    return str(value)
