"""``timetravel fanout PATH --at T --samples N`` and ``timetravel likelihood PATH --samples N``."""

from __future__ import annotations

import argparse
from typing import Any

from timetravel.cli.common import add_count_argument
from timetravel.cli.futures_common import add_common, run_engine
from timetravel.explore.fanout import (
    LIKELIHOOD_POINTS_MAX,
    LIKELIHOOD_SAMPLES_DEFAULT,
    SAMPLES_DEFAULT,
    fanout,
    likelihood,
)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fanout",
        help="run many futures from one moment and report the failure rate by signature",
        description=(
            "Fork the recording at --at T and run --samples futures from there, each with its own branch key "
            "(1, 2, 3, ...: `branch --branch-seed K` reproduces sample K), to the end or a failure. Prints the "
            "failure rate and the futures by failure signature ('pass' counts passing ones). Futures are not "
            "stored unless --keep. Exit code 0 whatever the rate, 2 on bad input."
        ),
    )
    add_common(parser, "print one JSON object: at_ns, samples, failure_rate, by_signature")
    parser.add_argument("--at", metavar="T", required=True, help="950, 950ms, 1.5s, 120us or #N")
    add_count_argument(parser, "--samples", default=SAMPLES_DEFAULT, what="futures")
    parser.add_argument(
        "--branch", dest="parent", metavar="BRANCH", help="fan out from this branch (default main)"
    )
    parser.add_argument("--keep", action="store_true", help="store every future as a branch (b1, b2, ...)")
    parser.set_defaults(func=_fanout)

    parser = subparsers.add_parser(
        "likelihood",
        help="the fan-out failure rate at every snapshot: where it jumps to 1 is the point of no return",
        description=(
            "Run a fan-out of --samples futures from every snapshot of a branch before its end (at most "
            "--points, evenly spaced) and print the failure rate along the run. The point of no return is "
            "where the rate reaches 1 and stays there: from then on the damage is in the state, not in the "
            "interleavings still to come. Costs points x samples futures. Exit code 0, 2 on bad input."
        ),
    )
    add_common(
        parser,
        "print one JSON object: branch, samples, points [{at_ns, samples, ...}], point_of_no_return_ns",
    )
    add_count_argument(parser, "--samples", default=LIKELIHOOD_SAMPLES_DEFAULT, what="futures per snapshot")
    parser.add_argument("--branch", dest="parent", metavar="BRANCH", help="the branch to walk (default main)")
    add_count_argument(parser, "--points", default=LIKELIHOOD_POINTS_MAX, what="snapshots to fan out from")
    parser.add_argument("--from", dest="start", metavar="T", help="only snapshots at or after T")
    parser.add_argument("--to", dest="end", metavar="T", help="only snapshots at or before T")
    parser.set_defaults(func=_likelihood)


def _fanout(args: argparse.Namespace) -> int:
    return run_engine(
        args,
        lambda session, progress: fanout(
            session, args.at, args.samples, parent=args.parent, store=args.keep, progress=progress
        ),
    )


def _likelihood(args: argparse.Namespace) -> int:
    return run_engine(
        args,
        lambda session, progress: likelihood(
            session,
            args.samples,
            parent=args.parent,
            points_max=args.points,
            start=args.start,
            end=args.end,
            progress=progress,
        ),
    )
