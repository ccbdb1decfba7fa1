"""What the commands that open recordings share: user-error registration and the warnings line."""

from __future__ import annotations

import sys

from timetravel.cli.common import register_user_error
from timetravel.explore.paths import PathError
from timetravel.explore.session import Session
from timetravel.recording.format import RecordingError

register_user_error(RecordingError)
register_user_error(PathError)

EXIT_MISMATCH = 1


def open_session(path: str, scenario_target: str | None) -> Session:
    """Open a recording for a command, printing what a damaged file lacks on stderr."""
    session = Session.open(path, scenario_target=scenario_target)
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
