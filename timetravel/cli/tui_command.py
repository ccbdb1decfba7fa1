"""``timetravel tui PATH`` (alias ``timetravel open PATH``): the time-travel debugger on a recording.

The recording is opened before the screen is taken over, so a missing or damaged file, an
unknown scenario or branch, or a bad ``--at`` is one line on stderr and exit code 2, never a
half-drawn screen. Without a terminal (a pipe, CI, ``make demo`` redirected), or with
``--headless``/``--json``, it prints what the TUI would show at the failure instead.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from timetravel.cli.common import UsageError, add_json_argument, print_json
from timetravel.cli.output import say, warn
from timetravel.cli.recording_common import add_scenario_target, name_recorded_script, script_use
from timetravel.explore.commands import open_context, parse_moment
from timetravel.explore.navigate import branch_failure
from timetravel.explore.results import public_failure
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.sim.timefmt import format_time


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tui",
        aliases=["open"],
        help="open a recording in the time-travel debugger (a terminal UI)",
        description=(
            "Open a recording in the time-travel debugger: a timeline to scrub, the ranks at the cursor, "
            "the event log, the world's state, the GPU streams, the branch tree, and a command line (:) "
            "that speaks the command language (goto 950, branch --drop-fault f3, compare main b1, ...). "
            "? shows every key, q quits. Without a terminal, or with --headless, it prints what the "
            "debugger would show at the failure (or at --at) and exits. Exit code 0, or 2 on bad input."
        ),
    )
    parser.add_argument("path", metavar="PATH", help="a .ttr recording (timetravel run ... --record)")
    add_scenario_target(parser)
    parser.add_argument(
        "--branch", default=MAIN_BRANCH, help="open this branch of the recording (default main)"
    )
    parser.add_argument(
        "--at",
        metavar="T",
        help="start with the cursor at T: a time (950, 950ms, 1.5s) or an event (#1200); default: the "
        "failure (the start of a run that passes in the debugger, its end in the headless summary)",
    )
    parser.add_argument(
        "--headless", action="store_true", help="print the summary instead of opening the debugger"
    )
    add_json_argument(parser, "print the summary as one JSON object")
    parser.set_defaults(func=main)


def _has_terminal() -> bool:
    return sys.stdout.isatty() and sys.stdin.isatty()


def main(args: argparse.Namespace) -> int:
    from timetravel.tui.engine import Engine

    context = open_context(args.path, scenario_target=args.scenario_target, branch=args.branch)
    try:
        session = context.session
        for line in session.info.loss:
            warn(args.path, line)
        name_recorded_script(session, script_use(args))
        if args.at is not None:
            try:
                parse_moment(args.at, session.display_unit)
            except ValueError as error:
                raise UsageError(f"tui: --at {args.at!r}: {error}") from None
        engine = Engine(context)
        if args.headless or args.json or not _has_terminal():
            return _headless(engine, args)
        from timetravel.tui.app import TimeTravelApp

        first = [f"goto {args.at}"] if args.at is not None else []
        TimeTravelApp(engine, path=args.path, first_commands=first, open_at_failure=True).run()
        return 0
    finally:
        context.close()


def _headless(engine: Any, args: argparse.Namespace) -> int:
    from timetravel.tui.summary import summary_data, summary_lines

    session = engine.session
    at = args.at
    if at is None:
        failure = branch_failure(session)
        t_ns = failure["t_ns"] if failure is not None else session.end.t_ns
        at = format_time(int(t_ns), session.display_unit)
    outcome = engine.execute(f"goto {at}")
    if outcome.error is not None:
        raise UsageError(f"tui: {outcome.error}")
    data = summary_data(engine.view(), args.path, public_failure(branch_failure(session)))
    if args.json:
        print_json(data)
        return 0
    say(*summary_lines(data, engine.unit))
    if not args.headless:
        print(f"  (no terminal here: run `timetravel tui {args.path}` in one to open the debugger)")
    return 0
