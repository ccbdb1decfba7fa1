"""``timetravel demo-seed``: find (or check) a demo seed of dp_training's ``demo`` preset.

A demo seed fails at T≈1000 ms because of one fault that fired in (950, 1000) ms, at least three
steps earlier, and passes with ``bug=none`` (timetravel/scenarios/dp_training/demo.py has the exact
conditions). The preset carries one (``DEMO_SEED``); when a code change shifts the choices and the
pinned test says it is no longer one, this command finds the next.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from timetravel.cli.common import SEED_MAX, UsageError, add_json_argument, bounded_int, print_json
from timetravel.scenarios import get_scenario
from timetravel.scenarios.dp_training import demo
from timetravel.sim.timefmt import format_time

EXIT_FOUND = 0
EXIT_NONE = 1
PROGRESS_EVERY_SEEDS = 25


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo-seed",
        help="find a demo seed of dp_training's demo preset (or check one)",
        description=(
            "Search seeds of `dp_training --set preset=demo` for a demo seed: the run fails in [1000, 1100] ms "
            "because of one fault that fired in (950, 1000) ms at least 3 steps earlier, and passes with "
            "bug=none. Exit code 0 when one was found (or --check holds), 1 when none was."
        ),
    )
    parser.add_argument(
        "--from",
        dest="first",
        type=bounded_int(0, SEED_MAX),
        default=0,
        metavar="SEED",
        help="first seed (default 0)",
    )
    parser.add_argument("--count", type=int, default=1000, help="seeds to try at most (default 1000)")
    parser.add_argument(
        "--all", action="store_true", help="list every demo seed in the range, not just the first"
    )
    parser.add_argument(
        "--check",
        type=bounded_int(0, SEED_MAX),
        metavar="SEED",
        help="only say whether SEED is a demo seed, and why",
    )
    add_json_argument(parser, "print the demo seeds as a JSON list")
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    scenario = get_scenario("dp_training")
    if args.check is not None:
        seeds = range(args.check, args.check + 1)
    else:
        if args.count < 1 or args.count > demo.SEARCH_SEEDS_MAX or args.first < 0:
            raise UsageError(f"--from must be >= 0 and --count in [1, {demo.SEARCH_SEEDS_MAX}]")
        seeds = range(args.first, args.first + args.count)
    found = []
    for done, seed in enumerate(seeds, start=1):
        evidence = demo.check_seed(scenario, seed)
        if evidence is not None:
            found.append(evidence)
            if not args.json:
                _print_evidence(evidence)
            if not args.all:
                break
        if not args.json and args.check is None and done % PROGRESS_EVERY_SEEDS == 0:
            print(f"... {done} seeds tried, {len(found)} demo seeds", file=sys.stderr)
    if args.json:
        print_json([evidence.to_data() for evidence in found])
    elif not found:
        what = (
            f"seed {args.check} is not"
            if args.check is not None
            else f"none of seeds {seeds.start}..{seeds.stop - 1} is"
        )
        print(f"{what} a demo seed")
    return EXIT_FOUND if found else EXIT_NONE


def _print_evidence(evidence: demo.DemoSeed) -> None:
    failure = evidence.failure
    cause = evidence.root_cause
    print(
        f"seed {evidence.seed}: {failure['kind']} on {failure['node']} at {format_time(failure['t_ns'])} "
        f"(after step {evidence.detection_step}); root cause {cause['id']} {cause['kind']} on {cause['target']} "
        f"at {format_time(cause['t_start'])} (after step {evidence.fault_step}); passes with bug=none"
    )
    print(f"  reproduce: timetravel run dp_training --seed {evidence.seed} --set preset=demo")
