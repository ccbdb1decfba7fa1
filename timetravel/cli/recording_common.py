"""What the commands that open recordings share: user-error registration, the warnings line, and
the script a torch recording may re-execute (``--script``)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass

from timetravel.cli.common import (
    add_recorded_script_arguments,
    add_scenario_module_argument,
)
from timetravel.cli.output import warn
from timetravel.explore.replay import CAUSE_CODE_CHANGED
from timetravel.explore.session import Session
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.recording.format import RecordingError
from timetravel.recording.reader import RecordingReader

EXIT_MISMATCH = 1
ALWAYS_EXECUTES = frozenset({"replay", "branch", "rerun", "fanout", "likelihood", "minimize", "origin"})
"""Commands that re-execute a recording whatever their arguments: on a torch recording without
``--script`` they refuse at once. The others (inspect --at, compare, diff, export, shell, tui)
re-execute only when a time falls between snapshots, and refuse then, with the same line;
``explain`` answers from the stored recording and says in one line what ``--script`` would add."""
CHANGED_ON_PURPOSE = frozenset({"rerun"})
"""Commands about today's code: a script that changed since the recording runs, with a note."""


@dataclass(frozen=True)
class ScriptUse:
    """What the command line says about a torch recording's script."""

    path: str | None = None
    allow_changed: bool = False
    always_executes: bool = False
    changed_on_purpose: bool = False
    json: bool = False
    """The command prints JSON on stdout: the ranks' own output goes to stderr (as torchrun --json)."""


def script_use(args: argparse.Namespace) -> ScriptUse:
    command = str(getattr(args, "command", ""))
    return ScriptUse(
        path=getattr(args, "torch_script", None),
        allow_changed=bool(getattr(args, "allow_changed_script", False)),
        always_executes=command in ALWAYS_EXECUTES,
        changed_on_purpose=command in CHANGED_ON_PURPOSE,
        json=bool(getattr(args, "json", False)),
    )


def name_recorded_script(session: Session, use: ScriptUse) -> None:
    """Let the session re-execute the script the user named for a torch recording (its digest
    checked), or give it the one-line refusal that any re-execution raises; a command that always
    executes raises it now. Either goes in ``session.launch`` (sim/launch.py), never in a global.
    Any other scenario's recording ignores ``--script``."""
    if session.scenario.name != "torch":
        return
    from timetravel.sim.scenario import NotAuthorizedError
    from timetravel.torch.world import recorded_script

    config = session.info.config
    digest = recorded_script.recorded_digest(session.snapshot_world(0).nodes.get("c10d"))
    if use.json:
        session.launch = session.launch.with_output(sys.stderr)  # stdout is the command's JSON
    if use.path is None:
        refusal = recorded_script.refusal_message(config, digest)
        session.launch = recorded_script.refuse_execution(session.launch, config, digest, refusal)
        if use.always_executes:
            raise NotAuthorizedError(refusal)
        return
    session.launch, named = recorded_script.authorize_recorded_script(
        session.launch, config, digest, use.path, allow_changed=use.allow_changed or use.changed_on_purpose
    )
    missing = recorded_script.torch_missing_message()
    if missing is not None:
        session.launch = recorded_script.refuse_execution(session.launch, config, digest, missing)
        if use.always_executes:
            raise NotAuthorizedError(missing)
    if named.changed:
        print(f"timetravel: warning: {named.change_note()}", file=sys.stderr)
        # the user's code changed, so a re-execution that departs says so (not "determinism_bug")
        session.cause_if_mismatch = CAUSE_CODE_CHANGED


def open_session(
    path: str,
    scenario_target: str | None,
    branch: str | None = None,
    *,
    refuse_in_progress: str = "",
    script: ScriptUse | None = None,
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
        warn(path, line)
    try:
        name_recorded_script(session, script or ScriptUse())
    except BaseException:
        session.close()
        raise
    return session


def add_scenario_target(parser: argparse.ArgumentParser, *, executes: bool = True) -> None:
    """``--scenario MODULE:ATTR`` and the torch script options every recording command takes."""
    add_recorded_script_arguments(parser, executes=executes)
    add_scenario_module_argument(
        parser,
        "load the recording's scenario from this module (only needed for scenarios that are "
        "neither built in nor installed; a recording never makes timetravel import code by itself)",
    )
