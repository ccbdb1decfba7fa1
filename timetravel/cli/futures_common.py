"""What the CLI commands over alternate futures share (branch, branches, fanout, likelihood, compare,
diff, rerun): opening the recording, a progress bar on a terminal, and printing a result.

Exit codes: 0 when the command did its job, whatever the outcomes it reports (a failing branch is
an answer, not an error); 1 when the recording does not re-execute on today's code at the moment
asked (a replay mismatch: the message names the first differing event); 2 on bad input (a
corrupt file, an unknown branch or fault, a key that is not branchable). ``--json`` prints the
result's ``to_data()`` object and nothing else on stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import IO, Any

from timetravel.cli.common import add_json_argument, print_json
from timetravel.cli.output import say
from timetravel.cli.recording_common import EXIT_MISMATCH, add_scenario_target, open_session, script_use
from timetravel.explore.commands.render import render_text
from timetravel.explore.replay import ReplayDivergence
from timetravel.explore.session import Session
from timetravel.explore.work import WorkProgress

PROGRESS_BAR_CHARS = 30
PROGRESS_REDRAW_S = 0.1
"""A progress bar is redrawn at most this often (wall clock: this is the CLI, not the simulation)."""


class ProgressBar:
    """``[##########....................]  33%  branch b1`` on one terminal line, redrawn in place."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self.last_draw = 0.0
        self.drawn = False

    def __call__(self, progress: WorkProgress) -> None:
        now = time.monotonic()
        if now - self.last_draw < PROGRESS_REDRAW_S and progress.done < progress.total:
            return
        self.last_draw = now
        filled = round(progress.fraction * PROGRESS_BAR_CHARS)
        bar = "#" * filled + "." * (PROGRESS_BAR_CHARS - filled)
        detail = f"  {progress.detail}" if progress.detail else ""
        line = f"[{bar}] {progress.fraction:4.0%}  {progress.task}{detail}"
        self.stream.write("\r" + line[:120].ljust(120))
        self.stream.flush()
        self.drawn = True

    def close(self) -> None:
        if self.drawn:
            self.stream.write("\r" + " " * 120 + "\r")
            self.stream.flush()


def progress_bar() -> ProgressBar | None:
    """A progress bar on stderr when it is a terminal (never in pipes, logs or tests)."""
    return ProgressBar(sys.stderr) if sys.stderr.isatty() else None


def add_common(parser: argparse.ArgumentParser, json_help: str, *, executes: bool = True) -> None:
    parser.add_argument("path", metavar="PATH", help="a .ttr recording")
    add_scenario_target(parser, executes=executes)
    add_json_argument(parser, json_help)


def run_engine(
    args: argparse.Namespace,
    work: Callable[[Session, Callable[[WorkProgress], None] | None], Any],
    extra_lines: Callable[[Session, Any], list[str]] | None = None,
) -> int:
    """Open the recording, run ``work(session, progress)``, print its result; the exit code."""
    with open_session(args.path, args.scenario_target, script=script_use(args)) as session:
        bar = progress_bar()
        try:
            result = work(session, bar)
        except ReplayDivergence as divergence:
            say(f"timetravel: error: {divergence}", file=sys.stderr)
            return EXIT_MISMATCH
        finally:
            if bar is not None:
                bar.close()
        if args.json:
            print_json(result.to_data())
            return 0
        say(*render_text(result, session.display_unit))
        if extra_lines is not None:
            say(*extra_lines(session, result))
    return 0
