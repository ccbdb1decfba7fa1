"""``timetravel explain REC [--branch B]`` and ``timetravel origin REC PATH [--at T]``: why it failed."""

from __future__ import annotations

import argparse
from typing import Any

from timetravel.cli.futures_common import add_common, run_engine
from timetravel.explore.explain import explain
from timetravel.explore.provenance import origin
from timetravel.explore.tracks import open_track


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "explain",
        help="why a branch failed: the causal chain from the detector back to its fault records",
        description=(
            "Explain a recorded failure as a chain of events, each with its time, node, kind and the state it "
            "changed: the detector that fired, the message it read, the event where the failing node's state "
            "became unlike every peer's, the events that wrote the values it read, down to fault records or "
            "choices with no cause inside the simulation. Derived by re-executing events from snapshots and "
            "noting what their handlers read; nothing is asked of the scenario. On a torch run it ends at the "
            "rank, the optimizer step, the sampler indices of its batch and the first module whose output or "
            "gradient went non-finite (the module probe re-executes the run: --script PATH; without it, what "
            "the recording stores). Exit code 0, 2 on bad input."
        ),
    )
    add_common(
        parser,
        "print one JSON object: branch, failure, links [{role, event, t_ns, node, kind, ...}], site (torch)",
    )
    parser.add_argument("--branch", metavar="B", default=None, help="the failing branch (default: main)")
    parser.set_defaults(func=_explain)

    parser = subparsers.add_parser(
        "origin",
        help="which event last wrote a state value, from what, and what caused that event",
        description=(
            "Value provenance: the last event at or before T that changed the value at PATH (a reverse "
            "watchpoint), what it changed it from and to, what that event read, and the event that scheduled "
            "it. Exit code 0, 2 on bad input."
        ),
    )
    add_common(parser, "print one JSON object: path, event, t_ns, node, kind, changes, reads, caused_by")
    parser.add_argument("state_path", metavar="STATE_PATH", help="a state path, e.g. nodes/r3/skip_local")
    parser.add_argument("--at", metavar="T", default="end", help="950, 950ms, 1.5s, #N (default: the end)")
    parser.add_argument("--branch", metavar="B", default=None, help="the branch (default: main)")
    parser.set_defaults(func=_origin)


def _explain(args: argparse.Namespace) -> int:
    return run_engine(args, lambda session, progress: explain(session, args.branch, progress=progress))


def _origin(args: argparse.Namespace) -> int:
    def work(session: Any, progress: Any) -> Any:
        track = session if args.branch in (None, session.branch) else open_track(session, args.branch)
        return origin(track, args.state_path, args.at)

    return run_engine(args, work)
