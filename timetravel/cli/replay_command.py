"""``timetravel replay PATH``: re-execute a whole recording and verify it bit for bit."""

from __future__ import annotations

import argparse
from typing import Any

from timetravel.cli.common import add_json_argument, print_json
from timetravel.cli.output import say
from timetravel.cli.recording_common import EXIT_MISMATCH, add_scenario_target, open_session, script_use
from timetravel.explore.verify_replay import replay_session


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="re-execute a recording and verify its hash chain, snapshots and outcome",
        description=(
            "Re-execute a recording from its scenario's initial world and check every chain batch, the "
            "state at every snapshot and the end against what was recorded. A difference names the first "
            "differing event and its likely cause: code_changed (the code fingerprint differs), platform "
            "(same code, another platform) or determinism_bug. Exit code 0 when everything matches, 1 on a "
            "mismatch, 2 on bad input (a corrupt recording, an unknown scenario). A torch recording re-executes "
            "only the script named with --script PATH, whose sha256 must be the recorded one (docs/torch.md)."
        ),
    )
    parser.add_argument("path", metavar="PATH", help="a .ttr recording")
    add_scenario_target(parser)
    add_json_argument(
        parser, "print one JSON object: events, verified, first_mismatch, cause, batches_checked, ..."
    )
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    with open_session(
        args.path, args.scenario_target, refuse_in_progress="replay it", script=script_use(args)
    ) as session:
        report = replay_session(session)
    if args.json:
        print_json(report.to_json())
    else:
        _print_human(report.to_json())
    return 0 if report.verified else EXIT_MISMATCH


def _print_human(report: dict[str, Any]) -> None:
    say(*_human_lines(report))


def _human_lines(report: dict[str, Any]) -> list[str]:
    lines = []
    checked = f"{report['batches_checked']} chain batches, {report['snapshots_checked']} snapshots"
    if report["verified"]:
        lines.append(
            f"replay of {report['recording']}: {report['events']:,} events verified ({checked}) "
            f"in {report['wall_s']:.2f} s; outcome {report['outcome']}"
        )
        if report["not_verified"]:
            lines.append(f"  not verified: {'; '.join(report['not_verified'])}")
        return lines
    mismatch = report["first_mismatch"]
    lines.append(f"replay of {report['recording']}: MISMATCH after checking {checked}")
    where = f"event #{mismatch['event']}" if mismatch["event"] is not None else "the recording"
    what = "the recording's own frames disagree" if mismatch["what"] == "recording" else mismatch["what"]
    lines.append(f"  first difference: {what} at {where}")
    lines.append(f"  {mismatch['detail']}")
    if mismatch.get("recorded"):
        lines.append(f"  recorded: {mismatch['recorded']}")
        lines.append(f"  replayed: {mismatch['replayed']}")
    lines.append(f"  cause: {report['cause']}")
    return lines
