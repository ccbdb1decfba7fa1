"""``timetravel compare PATH A B`` and ``timetravel diff PATH A B``: two branches side by side."""

from __future__ import annotations

import argparse
from typing import Any

from timetravel.cli.common import bounded_int
from timetravel.cli.futures_common import add_common, run_engine
from timetravel.explore.compare import compare, diff
from timetravel.explore.diff import CHANGES_MAX_DEFAULT
from timetravel.explore.results import CompareResult
from timetravel.explore.session import Session
from timetravel.sim.timefmt import format_time

METRIC_ROWS_MAX = 20


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="two branches side by side: outcomes, metric curves, first divergence",
        description=(
            "Compare branches A and B of a recording (main is the recorded run): each one's outcome, their "
            "metric curves (summed over nodes per time), and their first divergence: snapshots are bisected "
            "by effects hash, then both runs are stepped event by event, matching events by (t, kind, node, "
            "payload digest), to the first event whose effects differ. Exit code 0, 2 on bad input."
        ),
    )
    add_common(parser, "print one JSON object: a {name, outcome, failure}, b {...}, first_divergence")
    parser.add_argument("a", metavar="A", help="a branch (e.g. main)")
    parser.add_argument("b", metavar="B", help="another branch (e.g. b1)")
    parser.set_defaults(func=_compare)

    parser = subparsers.add_parser(
        "diff",
        help="the state diff of two branches at one time (default: at their first divergence)",
        description=(
            "Seek branches A and B to one moment and diff their worlds: dicts by key, lists by index, arrays "
            "summarized (elements that differ, max abs and ULP difference, first index, NaN/Inf counts). "
            "Without --at the moment is their first divergence (each right after its diverging event), or "
            "their ends when they never diverge. --path narrows it (wildcards: nodes/*/weights). Exit code 0, "
            "2 on bad input."
        ),
    )
    add_common(parser, "print one JSON object: at_ns, paths [{path, change, summary}], first_divergence")
    parser.add_argument("a", metavar="A", help="a branch")
    parser.add_argument("b", metavar="B", help="another branch")
    parser.add_argument("--at", metavar="T", help="950, 950ms, 1.5s, #N (default: the first divergence)")
    parser.add_argument(
        "--path", dest="state_path", default="", metavar="P", help="only under this state path"
    )
    parser.add_argument(
        "--first-divergence",
        action="store_true",
        help="with --at: also find and report the first divergence (always done without --at)",
    )
    parser.add_argument(
        "--max",
        type=bounded_int(1, 1_000_000),
        default=CHANGES_MAX_DEFAULT,
        metavar="N",
        help=f"paths shown (default {CHANGES_MAX_DEFAULT}; the rest are counted)",
    )
    parser.set_defaults(func=_diff)


def _compare(args: argparse.Namespace) -> int:
    return run_engine(
        args, lambda session, progress: compare(session, args.a, args.b, progress=progress), _metric_lines
    )


def _diff(args: argparse.Namespace) -> int:
    return run_engine(
        args,
        lambda session, progress: diff(
            session,
            args.a,
            args.b,
            at=args.at,
            path=args.state_path,
            with_divergence=args.first_divergence,
            changes_max=max(args.max, 0),
            progress=progress,
        ),
    )


def _metric_lines(session: Session, result: CompareResult) -> list[str]:
    """The metric table (its figures are ``metrics`` in ``--json`` too)."""
    unit = session.display_unit
    if not result.metric_rows:
        return []
    lines = ["metrics (summed over nodes)       points a/b        last a        last b  first differs"]
    for row in result.metric_rows[:METRIC_ROWS_MAX]:
        differs = "never" if row.first_differs_ns is None else format_time(row.first_differs_ns, unit)
        lines.append(
            f"  {row.name[:30]:<30} {row.points_a:>6}/{row.points_b:<6} {_last(row.last_a):>13} "
            f"{_last(row.last_b):>13}  {differs}"
        )
    if len(result.metric_rows) > METRIC_ROWS_MAX:
        lines.append(f"  ... and {len(result.metric_rows) - METRIC_ROWS_MAX} more metrics")
    return lines


def _last(value: float | int | None) -> str:
    return "-" if value is None else f"{value:.6g}"
