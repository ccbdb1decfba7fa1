"""``timetravel branch PATH --at T ...`` and ``timetravel branches PATH``: alternate futures of a recording."""

from __future__ import annotations

import argparse
from typing import Any

from timetravel.cli.common import add_settings_argument, print_json
from timetravel.cli.futures_common import add_common, run_engine
from timetravel.cli.output import say, warn
from timetravel.explore.branch_tree import branch_tree
from timetravel.explore.branching import BranchChanges, branch
from timetravel.explore.commands.render import render_text
from timetravel.explore.results import BranchesResult
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.recording.reader import RecordingReader


def register(subparsers: Any) -> None:
    _register_branch(subparsers)
    _register_branches(subparsers)


def _register_branch(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "branch",
        help="run an alternate future of a recording from time T and store it in the recording",
        description=(
            "Seek the recording to --at T (the state after every event with time <= T, or #N), apply the "
            "changes, and run that future to the end or a failure, storing it in the same file as branch "
            "b1, b2, ... (or --name). A new --branch-seed gives every choice after T a new value (jitter, "
            "orderings, random fault hits); faults are dropped, added or edited by id; --set changes config "
            "keys the scenario marks branchable (e.g. bug=none). A fault spec is comma-separated key=value: "
            "kind=drop,target=r3,t_start=950ms,t_end=990ms,probability=0.5,kinds=grad|need (fields id, kind, "
            "target, t_start, t_end, note; every other key is a parameter; bare times are in the recording's "
            "unit; a|b is a list; JSON works too). An edit is ID:KEY=VALUE,... (f3:t_end=990ms). Exit code 0 "
            "whatever the branch's outcome, 2 on bad input."
        ),
    )
    add_common(parser, "print one JSON object: name, parent, at_ns, outcome, failure")
    parser.add_argument("--at", metavar="T", required=True, help="950, 950ms, 1.5s, 120us or #N")
    parser.add_argument("--from", dest="parent", metavar="BRANCH", help="the branch to fork (default main)")
    parser.add_argument(
        "--branch-seed", type=int, metavar="N", help="a new branch key for every choice after T"
    )
    parser.add_argument(
        "--drop-fault", action="append", default=[], metavar="ID", help="remove a fault (repeatable)"
    )
    parser.add_argument(
        "--add-fault", action="append", default=[], metavar="SPEC", help="add a fault (repeatable; see above)"
    )
    parser.add_argument(
        "--edit-fault", action="append", default=[], metavar="ID:K=V", help="change a fault (repeatable)"
    )
    add_settings_argument(parser, "change a branchable config key (repeatable)")
    parser.add_argument("--name", metavar="NAME", help="the branch's name (default: the next free bN)")
    parser.set_defaults(func=_branch)


def _branch(args: argparse.Namespace) -> int:
    changes = BranchChanges(
        branch_key=args.branch_seed,
        drop_faults=tuple(args.drop_fault),
        add_faults=tuple(args.add_fault),
        edit_faults=tuple(args.edit_fault),
        settings=tuple(args.settings),
    )
    return run_engine(
        args,
        lambda session, progress: branch(
            session, args.at, changes, name=args.name, parent=args.parent, progress=progress
        ),
    )


def _register_branches(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "branches",
        help="list the branches of a recording with their outcomes",
        description="The branch tree of a recording: main (the recorded run) and every stored branch, with its "
        "parent, fork time, changes and outcome (in progress while a recorder is still writing it). Reads "
        "the catalog only: instant on any recording, and the scenario's code is not needed.",
    )
    add_common(
        parser,
        "print one JSON object: current, branches [{name, parent, at_ns, outcome, failure, ...}]",
        executes=False,
    )
    parser.set_defaults(func=_branches)


def _branches(args: argparse.Namespace) -> int:
    """The catalog alone answers: no snapshot is restored and no scenario loaded (opening a
    Session restored the first snapshot, which on the demo decoded bfloat16 arrays: ~1 s)."""
    with RecordingReader.open(args.path) as reader:
        for line in reader.describe_loss(MAIN_BRANCH):
            warn(args.path, line)
        result = BranchesResult(branch_tree(reader))
        unit = str(reader.header.get("display_unit") or "ms")
    if args.json:
        print_json(result.to_data())
        return 0
    say(*render_text(result, unit))
    say(*(f"    {row.name}: {'; '.join(row.changes)}" for row in result.branches if row.changes))
    return 0
