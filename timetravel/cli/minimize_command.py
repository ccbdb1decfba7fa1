"""``timetravel minimize PATH``: shrink a recorded failure to a minimal repro (.ttr and pytest)."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from typing import Any

from timetravel.cli.common import UsageError, add_count_argument, add_json_argument, print_json
from timetravel.cli.output import add_force_argument
from timetravel.cli.progress import ProgressLine
from timetravel.cli.recording_common import add_scenario_target, open_session, script_use
from timetravel.explore.commands.render import render_text
from timetravel.explore.minimize_run import minimize_run
from timetravel.explore.minimize_trials import (
    MAX_RUNS_DEFAULT,
    MAX_SECONDS_DEFAULT,
    MAX_STALL_DEFAULT,
    Budget,
    Progress,
)

EXIT_INTERRUPTED = 130


class StopRequest:
    """Ctrl-C (SIGINT) while minimizing: the first asks the search to stop after the run in progress
    and still write the best repro so far; a second one aborts at once (KeyboardInterrupt)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def __call__(self) -> bool:
        return self.requested

    def _on_interrupt(self, signal_number: int, frame: Any) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True
        print(
            "\ntimetravel: interrupted: stopping after this run to write the best repro so far "
            "(Ctrl-C again to abort)",
            file=sys.stderr,
        )

    def __enter__(self) -> StopRequest:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGINT, self._on_interrupt)
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "minimize",
        help="shrink a recorded failure to a minimal reproduction with the same signature",
        description=(
            "Re-run the recorded run's inputs, keeping its failure signature, through passes repeated to "
            "a fixpoint: ddmin over the fault schedule, fewer ranks or steps where the scenario allows, "
            "smaller fault parameters, choices towards 0. Then record the minimized run (--out), find the "
            "latest of its snapshots from which the failure reproduces, and write a pytest file that replays "
            "the recording from there and asserts the signature (--pytest; without --out the recording goes "
            "next to it). A budget bounds the search; when it runs out, or at a Ctrl-C, the best result so far is "
            "written and said to be partial (a second Ctrl-C aborts). Exit code 0 when it minimized, 2 on bad "
            "input (a branch that did not fail, an unknown branch), 130 when interrupted."
        ),
    )
    parser.add_argument("path", metavar="PATH", help="a .ttr recording of a failing run")
    parser.add_argument(
        "--branch",
        metavar="B",
        help="the failing branch (default main); a branch is minimized from its fork and its repro is "
        "the recording with the minimized future appended as branch B-min",
    )
    parser.add_argument("--out", metavar="FILE.ttr", help="write the minimized run's recording here")
    parser.add_argument("--pytest", metavar="FILE.py", help="write a pytest file that replays the repro")
    add_force_argument(parser)
    add_count_argument(parser, "--max-runs", default=MAX_RUNS_DEFAULT, what="stop after N runs", metavar=None)
    parser.add_argument(
        "--max-seconds",
        type=float,
        default=MAX_SECONDS_DEFAULT,
        help=f"stop after S seconds of wall time (default {MAX_SECONDS_DEFAULT:g})",
    )
    add_count_argument(
        parser,
        "--max-stall",
        default=MAX_STALL_DEFAULT,
        what="stop after N runs without progress",
        metavar=None,
    )
    add_scenario_target(parser)
    add_json_argument(
        parser,
        "print one JSON object: signature, faults_before, faults_after, faults_kept, choices_before, "
        "choices_after, runs, seconds, out, pytest",
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    for name in ("max_runs", "max_stall"):
        if getattr(args, name) < 1:
            raise UsageError(f"minimize: --{name.replace('_', '-')} must be at least 1")
    if not args.max_seconds > 0:
        raise UsageError("minimize: --max-seconds must be a positive number")
    budget = Budget(max_runs=args.max_runs, max_seconds=args.max_seconds, max_stall=args.max_stall)
    with (
        open_session(args.path, args.scenario_target, args.branch, script=script_use(args)) as session,
        ProgressLine() as line,
        StopRequest() as stop,
    ):

        def progress(step: Progress) -> None:
            line.update(
                step.runs,
                budget.max_runs,
                f"runs ({step.pass_name}: {step.faults} faults, {step.choices_nonzero} choices)",
            )

        result = minimize_run(
            session,
            out=args.out,
            pytest=args.pytest,
            budget=budget,
            progress=progress,
            should_stop=stop,
            scenario_target=args.scenario_target,
            force=args.force,
        )
        unit = session.display_unit
    if args.json:
        print_json(result.to_data())
    else:
        print("\n".join(render_text(result, unit)))
    if stop.requested and result.partial:
        print(
            "timetravel: interrupted: the repro written is partial (the best result so far)", file=sys.stderr
        )
        return EXIT_INTERRUPTED
    return 0
