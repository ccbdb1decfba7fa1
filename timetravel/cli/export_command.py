"""``timetravel export PATH --perfetto FILE.json``: a recorded run as Chrome trace events for Perfetto."""

from __future__ import annotations

import argparse
from typing import Any

from timetravel.cli.common import UsageError, add_json_argument, print_json
from timetravel.cli.progress import ProgressLine
from timetravel.cli.recording_common import add_scenario_target, open_session, script_use
from timetravel.explore.commands.render import render_text
from timetravel.explore.perfetto import export_perfetto
from timetravel.explore.work import WorkProgress
from timetravel.recording.files import check_output_path


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export a recorded run as Chrome trace events, to open in Perfetto's UI",
        description=(
            "Re-execute a recorded branch (verifying its hash chain) and write it as Chrome trace event "
            "JSON: one process per node (a rank, with its host), an events thread with every handled event, "
            "one thread per GPU stream with its kernels, messages as flows from sender to receiver, faults "
            "and the failure as instant events. Open the file at https://ui.perfetto.dev. Exit code 0 when "
            "the file was written, 2 on bad input."
        ),
    )
    parser.add_argument("path", metavar="PATH", help="a .ttr recording")
    parser.add_argument("--perfetto", metavar="FILE.json", required=True, help="the trace file to write")
    parser.add_argument("--branch", metavar="B", help="the branch to export (default: main)")
    add_scenario_target(parser)
    add_json_argument(
        parser,
        "print one JSON object: path, format, trace_events, bytes, events, kernels, messages, faults, truncated",
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    if not args.perfetto.strip():
        raise UsageError("export: --perfetto needs a file name")
    check_output_path(args.perfetto)
    with (
        open_session(args.path, args.scenario_target, args.branch, script=script_use(args)) as session,
        ProgressLine() as line,
    ):

        def progress(step: WorkProgress) -> None:
            line.update(step.done, step.total, "events exported")

        try:
            result = export_perfetto(session, args.perfetto, progress=progress)
        except OSError as error:
            if error.filename is None and error.strerror is not None:
                raise OSError(error.errno, error.strerror, args.perfetto) from None
            raise
        unit = session.display_unit
    if args.json:
        print_json(result.to_data())
    else:
        print("\n".join(render_text(result, unit)))
    return 0
