"""What the commands that open recordings share: user-error registration and the warnings line."""

from __future__ import annotations

import sys

from timetravel.cli.common import register_user_error
from timetravel.explore.paths import PathError
from timetravel.explore.session import Session
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.recording.format import RecordingError
from timetravel.recording.reader import RecordingReader

register_user_error(RecordingError)
register_user_error(PathError)

EXIT_MISMATCH = 1


def open_session(
    path: str, scenario_target: str | None, branch: str | None = None, *, refuse_in_progress: str = ""
) -> Session:
    """Open a recording (at ``branch``, default main) for a command, printing what a damaged file
    lacks on stderr. An unknown branch is a user error that lists the branches there are.

    ``refuse_in_progress`` (what to do instead, e.g. "replay it"): a command whose answer needs the
    whole run refuses a recording that is still being written, in one line, rather than report the
    part written so far as the run."""
    if branch is not None and branch != MAIN_BRANCH:
        with RecordingReader.open(path) as reader:
            known = [MAIN_BRANCH, *reader.catalog.branches]
        if branch not in known:
            raise RecordingError(f"{path}: no branch {branch!r} (branches: {', '.join(known)})")
    session = Session.open(path, scenario_target=scenario_target, branch=branch or MAIN_BRANCH)
    if refuse_in_progress and session.info.in_progress:
        session.close()
        raise RecordingError(
            f"{path}: the recording is in progress (another process is still writing it); "
            f"{refuse_in_progress} once the run has finished"
        )
    for line in session.info.loss:
        print(f"timetravel: warning: {path}: {line}", file=sys.stderr)
    return session


def add_scenario_target(parser: object) -> None:
    parser.add_argument(  # type: ignore[attr-defined]
        "--scenario",
        dest="scenario_target",
        metavar="MODULE:ATTR",
        help="load the recording's scenario from this module (only needed for scenarios that are "
        "neither built in nor installed; a recording never makes timetravel import code by itself)",
    )
