"""``timetravel rerun PATH [--set k=v]...``: the recorded inputs on today's code — did my fix fix it?"""

from __future__ import annotations

import argparse
from typing import Any

from timetravel.cli.common import add_settings_argument
from timetravel.cli.futures_common import add_common, run_engine
from timetravel.explore.rerun import rerun


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "rerun",
        help="run the recorded seed, faults and choices on today's code and compare with the recording",
        description=(
            "Build the recorded run again with today's code: the recorded seed and config (--set changes any "
            "key, e.g. bug=none), the recorded fault schedule pinned as an explicit list, and the recorded "
            "choices matched by site (from the choice log when the run was recorded with --record-choices, "
            "otherwise drawn again from the seed; the output says which). Prints today's outcome next to the "
            "recorded one and the first divergence from the recording. Exit code 0 whatever the outcome "
            "(compare `outcome` and `recorded` in --json), 2 on bad input. On a torch recording, --script PATH "
            "names today's script: one that changed since the recording runs, with a warning saying so."
        ),
    )
    add_common(
        parser,
        "print one JSON object: outcome, failure, recorded {outcome, failure}, settings, first_divergence, "
        "events, choices, faults_pinned",
    )
    add_settings_argument(parser, "change a config key for the rerun (repeatable)")
    parser.set_defaults(func=_rerun)


def _rerun(args: argparse.Namespace) -> int:
    return run_engine(args, lambda session, progress: rerun(session, args.settings, progress=progress))
