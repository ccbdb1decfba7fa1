"""``timetravel inspect PATH``: the world of a recording at a time, or one subtree of it."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from timetravel.cli.common import add_json_argument, bounded_int, print_json
from timetravel.cli.output import say
from timetravel.cli.recording_common import EXIT_MISMATCH, add_scenario_target, open_session, script_use
from timetravel.explore.inspect_view import SUMMARY_DEPTH_DEFAULT, render, resolve, summarize
from timetravel.explore.replay import ReplayDivergence
from timetravel.sim.elided import ElidedError
from timetravel.sim.timefmt import format_time


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "inspect",
        help="show the world of a recording at a time (or one state path)",
        description=(
            "Seek a recording to --at T (the state after every event with time <= T; #N for the state "
            "after event N; default: the end) and print the world there, or the subtree at --path "
            "(e.g. nodes/n3 or nodes/rank3/weights; arrays are summarized). The seek re-executes from the "
            "nearest snapshot and verifies the hash chain: a mismatch exits with code 1."
        ),
    )
    parser.add_argument("path", metavar="PATH", help="a .ttr recording")
    parser.add_argument("--at", metavar="T", default="end", help="950, 950ms, 1.5s, #1200, start or end")
    parser.add_argument(
        "--path", dest="state_path", metavar="P", default="", help="a state path, e.g. nodes/n3"
    )
    parser.add_argument(
        "--depth",
        type=bounded_int(0, 64),
        default=SUMMARY_DEPTH_DEFAULT,
        help="levels of nested data to show (default 3)",
    )
    add_scenario_target(parser)
    add_json_argument(parser, "print one JSON object: at_ns, events, state_hash, path, value")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    with open_session(args.path, args.scenario_target, script=script_use(args)) as session:
        try:
            position = session.goto(args.at)
        except ReplayDivergence as divergence:
            say(f"timetravel: error: {divergence}", file=sys.stderr)
            return EXIT_MISMATCH
        world = session.world

        def summary() -> Any:
            value = resolve(session.world, args.state_path) if args.state_path else _overview(session.world)
            return summarize(value, args.depth)

        try:
            summarized = session.read_values(summary)
        except ElidedError as error:
            raise ElidedError(f"{error} (name the script with --script to rebuild it)") from None
        result = {
            "recording": args.path,
            "at_ns": position.t_ns,
            "events": position.events,
            "state_hash": world.state_hash(),
            "path": args.state_path.strip("/"),
            "value": summarized,
        }
        unit = session.display_unit
    if args.json:
        print_json(result)
        return 0
    say(
        f"{session.info.scenario} seed {session.info.seed} at {format_time(position.t_ns, unit)} "
        f"(event #{position.events:,}), state {result['state_hash']}",
        f"{result['path'] or '/'}:",
        *render(result["value"], 1),
    )
    return 0


def _overview(world: Any) -> dict[str, Any]:
    """The top of the tree: counts for the big parts, values for the small ones."""
    return {
        "clock": {"t_ns": world.t_ns, "seq": world.seq, "events": world.events_processed},
        "nodes": f"{len(world.nodes)} nodes",
        "queue": f"{len(world.queue)} pending events",
        "faults": world.faults,
        "failures": world.failures,
        "metrics": {name: f"{len(series)} points" for name, series in world.metrics.items()},
        "fabric": world.fabric,
        "down": world.down,
        "log": f"{len(world.log)} lines",
    }
