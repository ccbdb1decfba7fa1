"""``timetravel compare PATH A B`` and ``timetravel diff PATH A B``: two branches side by side."""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import Any

from timetravel.cli.common import UsageError, bounded_int
from timetravel.cli.futures_common import add_common, run_engine
from timetravel.explore.compare import compare, diff
from timetravel.explore.compare_results import CompareResult
from timetravel.explore.diff import CHANGES_MAX_DEFAULT
from timetravel.explore.reference import (
    METRIC_DEFAULT,
    NODE_DEFAULT,
    RTOL_DEFAULT,
    load_reference,
    overlay_branch,
)
from timetravel.explore.session import Session
from timetravel.sim.timefmt import format_time

METRIC_ROWS_MAX = 20


def register(subparsers: Any) -> None:
    _register_compare(subparsers)
    _register_diff(subparsers)


def _register_compare(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compare",
        help="two branches side by side: outcomes, metric curves, first divergence",
        description=(
            "Compare branches A and B of a recording (main is the recorded run): each one's outcome, their "
            "metric curves (summed over nodes per time), and their first divergence: snapshots are bisected "
            "by effects hash, then both runs are stepped event by event, matching events by (t, kind, node, "
            "payload digest), to the first event whose effects differ. --reference FILE lays a real run's "
            'logged losses (CSV step,loss with or without a header, or JSON lines {"step": N, "loss": X}) '
            "over both branches: the k-th value of --reference-metric on --reference-node is matched to the "
            "file's k-th step, and the first step where |sim - ref| > rtol * |ref| is named. Exit code 0, 2 "
            "on bad input."
        ),
    )
    add_common(
        parser, "print one JSON object: a {name, outcome, failure}, b {...}, first_divergence (and reference)"
    )
    parser.add_argument("a", metavar="A", help="a branch (e.g. main)")
    parser.add_argument("b", metavar="B", help="another branch (e.g. b1)")
    parser.add_argument(
        "--reference",
        metavar="FILE",
        help="a real run's losses, step,loss CSV or JSON lines, overlaid on both branches",
    )
    parser.add_argument(
        "--reference-metric",
        default=None,
        metavar="NAME",
        help=f"the metric compared with the reference (default {METRIC_DEFAULT})",
    )
    parser.add_argument(
        "--reference-node",
        default=None,
        metavar="NODE",
        help=f"the node whose values of that metric are compared (default {NODE_DEFAULT})",
    )
    parser.add_argument(
        "--rtol",
        type=_rtol,
        default=None,
        metavar="R",
        help=f"a step is outside when |sim - ref| > R * |ref| (default {RTOL_DEFAULT:g})",
    )
    parser.set_defaults(func=_compare)


def _register_diff(subparsers: Any) -> None:
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
        "--ops",
        action="store_true",
        help=(
            "a torch run (with --script): re-execute the first step in which the branches differ on both, "
            "every rank's torch ops hashed as they run, and list in execution order the first ops whose "
            "outputs differ (rank, step, module, op, shapes, max abs and ULP difference; --json: ops)"
        ),
    )
    parser.add_argument(
        "--max",
        type=bounded_int(1, 1_000_000),
        default=CHANGES_MAX_DEFAULT,
        metavar="N",
        help=f"paths shown (default {CHANGES_MAX_DEFAULT}; the rest are counted)",
    )
    parser.set_defaults(func=_diff)


def _rtol(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a number, got {text!r}") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def _compare(args: argparse.Namespace) -> int:
    # The reference is read (and refused when malformed) before the divergence search runs.
    given = [
        option
        for option, value in (
            ("--reference-metric", args.reference_metric),
            ("--reference-node", args.reference_node),
            ("--rtol", args.rtol),
        )
        if value is not None
    ]
    if args.reference is None and given:
        raise UsageError(f"compare: {', '.join(given)} need --reference FILE")
    reference = None if args.reference is None else load_reference(args.reference)
    rtol = RTOL_DEFAULT if args.rtol is None else args.rtol
    metric = METRIC_DEFAULT if args.reference_metric is None else args.reference_metric
    node = NODE_DEFAULT if args.reference_node is None else args.reference_node

    def work(session: Session, progress: Any) -> CompareResult:
        result = compare(session, args.a, args.b, progress=progress)
        if reference is None:
            return result
        overlays = tuple(
            overlay_branch(
                session,
                name,
                reference,
                rtol=rtol,
                metric=metric,
                node=node,
            )
            for name in (args.a, args.b)
        )
        return dataclasses.replace(result, reference=overlays)

    return run_engine(args, work, _compare_lines)


def _compare_lines(session: Session, result: CompareResult) -> list[str]:
    """After the command language's text (which has the reference overlay): the metric table."""
    return _metric_lines(session, result)


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
            ops=args.ops,
        ),
    )


METRIC_NAME_WIDTH = 30
"""The metric table's name column; a longer name wraps onto the next lines (never cut: two tensors'
``grad_norm/transformer.h.0.attn...`` must not read alike)."""


def _metric_lines(session: Session, result: CompareResult) -> list[str]:
    """The metric table (its figures are ``metrics`` in ``--json`` too), ``loss`` first."""
    unit = session.display_unit
    if not result.metric_rows:
        return []
    header = "metrics (summed over nodes)".ljust(METRIC_NAME_WIDTH + 4)
    lines = [f"{header}points a/b        last a        last b  first differs"]
    for row in result.metric_rows[:METRIC_ROWS_MAX]:
        differs = "never" if row.first_differs_ns is None else format_time(row.first_differs_ns, unit)
        name, *rest = wrap_name(row.name, METRIC_NAME_WIDTH)
        lines.append(
            f"  {name:<{METRIC_NAME_WIDTH}} {row.points_a:>6}/{row.points_b:<6} {_last(row.last_a):>13} "
            f"{_last(row.last_b):>13}  {differs}"
        )
        lines += [f"    {part}" for part in rest]
    if len(result.metric_rows) > METRIC_ROWS_MAX:
        lines.append(f"  ... and {len(result.metric_rows) - METRIC_ROWS_MAX} more metrics (all in --json)")
    return lines


def wrap_name(name: str, width: int) -> list[str]:
    """``name`` in pieces of at most ``width`` characters (the later ones ``width - 2``: they are
    indented), broken after a ``/``, ``.`` or ``_`` where one falls in the piece."""
    pieces = []
    while len(name) > width:
        cut = max(name.rfind(separator, 0, width) for separator in "/._") + 1
        cut = cut if cut > 0 else width
        pieces.append(name[:cut])
        name = name[cut:]
        width = max(width - 2, 1) if len(pieces) == 1 else width
    return [*pieces, name]


def _last(value: float | int | None) -> str:
    return "-" if value is None else f"{value:.6g}"
