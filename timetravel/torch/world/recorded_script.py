"""Which script a torch *recording* may execute: only the file the user names with ``--script``.

A ``.ttr`` of a torch run stores its config (with the script's path on the recording machine) and,
in the World's ``c10d`` node, the sha256 of the script that ran. Opening it for inspection runs
nothing. Anything that re-executes the run (replay, a seek between snapshots, branch, fan-out,
rerun, minimize, ...) starts rank processes, and those run code: so the user names the script on
the command line (``--script PATH``), its digest must be the recorded one (or the user says
``--allow-changed-script``; ``rerun`` is about today's code and runs a changed script on purpose),
and the ranks then run the user's file instead of the recorded path, which may not exist here.

The recorded config is never changed (it is part of the World's hash): the override lives in
:data:`timetravel.torch.world.scenario.script_paths`, consulted where a rank is started. A recording
opened without ``--script`` registers a one-line refusal in ``script_refusals`` instead, so that
the first attempt to execute says what to pass rather than "not named on the command line".

This module does not import torch: the command line uses it on machines that have none.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from timetravel.sim.scenario import ConfigError, NotAuthorizedError
from timetravel.torch.world import scenario

ALLOW_CHANGED_FLAG = "--allow-changed-script"
DIGEST_SHOWN_CHARS = 12


class ScriptChangedError(NotAuthorizedError):
    """The script the user named is not the one the recording ran (its sha256 differs)."""


@dataclass(frozen=True)
class RecordedScript:
    """The outcome of naming a script for a recording: which file runs, and whether it changed."""

    recorded_path: str
    user_path: str
    recorded_sha256: str
    sha256: str

    @property
    def changed(self) -> bool:
        return self.sha256 != self.recorded_sha256

    def change_note(self) -> str:
        """One line for a run that executes a changed script on purpose (rerun, --allow-changed-script)."""
        return (
            f"the script changed since the recording (recorded sha256 {_short(self.recorded_sha256)}, "
            f"{self.user_path} is {_short(self.sha256)}): running it as it is today"
        )


def _short(digest: str) -> str:
    return digest[:DIGEST_SHOWN_CHARS] + "..." if len(digest) > DIGEST_SHOWN_CHARS else digest


def recorded_digest(c10d_state: Any) -> str:
    """The script's sha256 from the recorded ``nodes/c10d`` state at #0 ('' when it has none)."""
    if isinstance(c10d_state, dict) and isinstance(c10d_state.get("script_sha256"), str):
        return str(c10d_state["script_sha256"])
    return ""


def refusal_message(config: dict[str, Any], recorded_sha256: str) -> str:
    """What a command that must execute a torch recording opened without ``--script`` says."""
    if config.get("function"):
        return (
            f"this is a recording of the Python function {config['function']!r}: it re-executes only from "
            "Python (timetravel.torch.simulate), never from a recording"
        )
    return (
        f"this is a recording of a torch script: pass --script PATH (the script, sha256 "
        f"{_short(recorded_sha256)}) to re-execute it"
    )


def _recorded_key(config: dict[str, Any]) -> str:
    return str(Path(str(config.get("script", ""))).resolve())


def refuse_execution(config: dict[str, Any], recorded_sha256: str, message: str = "") -> str:
    """Remember that this recording's script may not run here (not named, or no torch): any attempt
    to start its ranks raises the one-line ``message`` (default: what to pass). Returns that line (a
    command that always executes raises it at once)."""
    message = message or refusal_message(config, recorded_sha256)
    if config.get("script") and not config.get("function"):
        scenario.script_refusals[_recorded_key(config)] = message
    return message


def authorize_recorded_script(
    config: dict[str, Any], recorded_sha256: str, script_path: str, *, allow_changed: bool = False
) -> RecordedScript:
    """Let the ranks of the recording with ``config`` run ``script_path``, the file the user named.

    Raises a one-line error when the recording is not of a script, the file is not a ``.py`` file,
    or its sha256 differs from the recorded one and ``allow_changed`` is false."""
    if config.get("function"):
        raise NotAuthorizedError(refusal_message(config, recorded_sha256))
    if not config.get("script"):
        raise ConfigError("the recording names no torch script to run")
    path = Path(script_path)
    if not path.is_file():
        raise ConfigError(f"--script {script_path!r} is not a file")
    if path.suffix != ".py":
        raise ConfigError(f"--script {script_path!r} is not a Python file (.py)")
    if path.stat().st_size > scenario.SCRIPT_BYTES_MAX:
        raise ConfigError(f"--script {script_path!r} is larger than {scenario.SCRIPT_BYTES_MAX} bytes")
    named = RecordedScript(
        recorded_path=str(config["script"]),
        user_path=script_path,
        recorded_sha256=recorded_sha256,
        sha256=scenario.script_digest(script_path),
    )
    if named.changed and not allow_changed:
        raise ScriptChangedError(
            f"the script changed since the recording (recorded sha256 {_short(recorded_sha256)}, "
            f"{script_path} is {_short(named.sha256)}): pass {ALLOW_CHANGED_FLAG} to run it anyway"
        )
    key = _recorded_key(config)
    scenario.authorize_script(script_path)
    scenario.script_refusals.pop(key, None)
    scenario.script_paths[key] = str(path.resolve())
    return named


def torch_missing_message() -> str | None:
    """One line when this machine cannot start ranks because torch is not installed, else None
    (checked without importing torch: a command that only inspects never pays for it)."""
    if importlib.util.find_spec("torch") is not None:
        return None
    return (
        "torch is not installed on this machine: running a script's ranks needs it "
        "(pip install 'timetravel[torch]'); a recording still opens for inspection"
    )


def authorize_for_session(session: Any, script_path: str) -> RecordedScript:
    """What a repro's pytest calls: run today's ``script_path`` for the recording ``session`` opened
    (a changed script is the point of a regression test: it passes once the bug is fixed)."""
    c10d_state = session.snapshot_world(0).nodes[scenario.C10D_NODE]
    return authorize_recorded_script(
        session.header["config"], recorded_digest(c10d_state), script_path, allow_changed=True
    )


def repro_setup(config: dict[str, Any]) -> tuple[str, str]:
    """The repro pytest's lines for a torch recording: the module-level ``SCRIPT`` (the file the
    user named with --script when minimizing, else the recorded path) and the call that lets the
    test run it (the ``Scenario.repro_setup`` hook)."""
    recorded = str(config.get("script", ""))
    named = scenario.script_paths.get(str(Path(recorded).resolve()), recorded) if recorded else ""
    module_lines = (
        "from timetravel.torch.world.recorded_script import authorize_for_session\n\n"
        f"SCRIPT = {str(Path(named).resolve())!r}\n"
        '"""The training script the test runs: today\'s version of it (the regression is fixed when it passes)."""\n'
    )
    return module_lines, "authorize_for_session(session, SCRIPT)"
