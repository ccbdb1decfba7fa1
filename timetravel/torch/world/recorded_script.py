"""Which script a torch *recording* may execute: only the file the user names with ``--script``.

A ``.ttr`` of a torch run stores its config (with the script's path on the recording machine) and,
in the World's ``c10d`` node, the sha256 of the script that ran. Opening it for inspection runs
nothing. Anything that re-executes the run (replay, a seek between snapshots, branch, fan-out,
rerun, minimize, ...) starts rank processes, and those run code: so the user names the script on
the command line (``--script PATH``), its digest must be the recorded one (or the user says
``--allow-changed-script``; ``rerun`` is about today's code and runs a changed script on purpose),
and the ranks then run the user's file instead of the recorded path, which may not exist here.

The recorded config is never changed (it is part of the World's hash): the override lives in the
Session's :class:`~timetravel.sim.launch.Launch` (``script_files``), consulted where a rank is
started (specs.py ``script_to_run``). A recording opened without ``--script`` gets a one-line
refusal in its launch instead, so that the first attempt to execute says what to pass rather than
"not named on the command line".

This module does not import torch: the command line uses it on machines that have none.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from timetravel.sim.launch import Launch
from timetravel.sim.scenario import ConfigError, NotAuthorizedError
from timetravel.torch.world.specs import C10D_NODE, check_script_file, resolved, script_digest

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
    return resolved(str(config.get("script", "")))


def refuse_execution(
    launch: Launch, config: dict[str, Any], recorded_sha256: str, message: str = ""
) -> Launch:
    """``launch`` with this recording's script refused: any attempt to start its ranks raises the
    one-line ``message`` (default: what to pass). A function target refuses by itself (it was never
    named in this process)."""
    message = message or refusal_message(config, recorded_sha256)
    if config.get("script") and not config.get("function"):
        return launch.with_refusal(_recorded_key(config), message)
    return launch


def authorize_recorded_script(
    launch: Launch,
    config: dict[str, Any],
    recorded_sha256: str,
    script_path: str,
    *,
    allow_changed: bool = False,
) -> tuple[Launch, RecordedScript]:
    """``launch`` letting the ranks of the recording with ``config`` run ``script_path``, the file the
    user named, and what was named. Raises a one-line error when the recording is not of a script,
    the file is not a ``.py`` file, or its sha256 differs from the recorded one and ``allow_changed``
    is false."""
    if config.get("function"):
        raise NotAuthorizedError(refusal_message(config, recorded_sha256))
    if not config.get("script"):
        raise ConfigError("the recording names no torch script to run")
    check_script_file(Path(script_path), script_path, "--script")
    named = RecordedScript(
        recorded_path=str(config["script"]),
        user_path=script_path,
        recorded_sha256=recorded_sha256,
        sha256=script_digest(script_path),
    )
    if named.changed and not allow_changed:
        raise ScriptChangedError(
            f"the script changed since the recording (recorded sha256 {_short(recorded_sha256)}, "
            f"{script_path} is {_short(named.sha256)}): pass {ALLOW_CHANGED_FLAG} to run it anyway"
        )
    return launch.with_script_file(_recorded_key(config), resolved(script_path)), named


def torch_missing_message() -> str | None:
    """One line when this machine cannot start ranks because torch is not installed, else None
    (checked without importing torch: a command that only inspects never pays for it)."""
    if importlib.util.find_spec("torch") is not None:
        return None
    return (
        "torch is not installed on this machine: running a script's ranks needs it "
        "(pip install 'timetravel[torch]'); a recording still opens for inspection"
    )


def name_script(session: Any, script_path: str, *, allow_changed: bool = False) -> RecordedScript:
    """From Python: let ``session`` (a torch recording) re-execute ``script_path``, the file you name;
    its sha256 must be the recorded one unless ``allow_changed``. The permission lives in
    ``session.launch`` (sim/launch.py) — no other session or process gets it."""
    c10d_state = session.snapshot_world(0).nodes[C10D_NODE]
    session.launch, named = authorize_recorded_script(
        session.launch,
        session.header["config"],
        recorded_digest(c10d_state),
        script_path,
        allow_changed=allow_changed,
    )
    return named


def authorize_for_session(session: Any, script_path: str) -> RecordedScript:
    """What a repro's pytest calls: run today's ``script_path`` for the recording ``session`` opened
    (a changed script is the point of a regression test: it passes once the bug is fixed)."""
    return name_script(session, script_path, allow_changed=True)


def repro_setup(config: dict[str, Any], launch: Launch) -> tuple[str, str]:
    """The repro pytest's lines for a torch recording: the module-level ``SCRIPT`` (the file the
    user named with --script when minimizing, else the recorded path) and the call that lets the
    test run it (the ``Scenario.repro_setup`` hook)."""
    recorded = str(config.get("script", ""))
    named = (launch.file_for(resolved(recorded)) or recorded) if recorded else ""
    module_lines = (
        "from timetravel.torch.world.recorded_script import authorize_for_session\n\n"
        f"SCRIPT = {str(Path(named).resolve())!r}\n"
        '"""The training script the test runs: today\'s version of it (the regression is fixed when it passes)."""\n'
    )
    return module_lines, "authorize_for_session(session, SCRIPT)"
