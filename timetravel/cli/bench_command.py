"""``timetravel bench SUITE``: measure speed and memory (figures for docs/performance.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from timetravel.bench import get_suite, suite_names
from timetravel.cli.common import add_json_argument, print_json


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "bench",
        help="measure speed and memory against reference implementations",
        description="Run a benchmark suite. Figures are best of 3 repeats; see docs/performance.md.",
    )
    parser.add_argument("suite", choices=suite_names(), help="which suite to run")
    parser.add_argument("--quick", action="store_true", help="smaller workloads (a smoke test, not a figure)")
    add_json_argument(parser, 'print {"bench": SUITE, "figures": {...}}')
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    try:
        result = get_suite(args.suite)(quick=args.quick)
    except RuntimeError as error:  # a reference the suite starts (real torchrun, SimPy) failed
        print(f"timetravel: bench {args.suite}: {error}", file=sys.stderr)
        return 1
    if args.json:
        print_json(result)
    else:
        print(f"bench {result['bench']}")
        width = max(len(key) for key in result["figures"])
        for key, value in result["figures"].items():
            shown = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else value
            print(f"  {key:<{width}}  {shown}")
    return 0
