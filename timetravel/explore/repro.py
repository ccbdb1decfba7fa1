"""A minimized failure as a standalone pytest file: the repro anyone can run, bit for bit.

Two forms. :func:`write_pytest` carries the minimized inputs as data and rebuilds the run from
them (no file next to it). :func:`write_replay_pytest` replays the repro *recording* that
``timetravel minimize --out`` writes, from its latest snapshot from which the failure reproduces
(explore/minimize_run.py): for a long run that is much faster, and the recording is what a person
opens in the TUI. What follows describes the first form; the second asserts the same thing.

The file carries the minimized inputs as data — scenario name, seed, config (JSON, with the
explicit fault schedule), pinned choices and zeroed choice sites — and one test that runs them
and asserts that the run **passes**. It imports only timetravel's public API, so it runs on any
machine with timetravel installed, with no recording next to it. It is a regression test: while the
bug is there it fails, naming the recorded signature and message; once the bug is fixed it passes.
(The replaying form starts from a snapshot that holds nothing of the failure yet, checked when it
is written, so that a fix can change what happens from there: explore/minimize_run.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

from timetravel.explore.minimize_trials import MinimizeResult
from timetravel.recording.files import make_parent_folders
from timetravel.scenarios import UnknownScenarioError, get_scenario
from timetravel.sim.launch import NO_LAUNCH, Launch
from timetravel.sim.timefmt import format_time_auto

_TEMPLATE = '''"""Minimal reproduction of {signature}: {scenario} seed {seed}, written by `timetravel minimize`.

{summary}
A regression test: while the bug is there it fails with the recorded signature; once the bug is
fixed it passes. Keep it.
"""

import json

from timetravel.explore.minimize_trials import ChoicePins
from timetravel.scenarios import {loader}
from timetravel.sim import Simulation
from timetravel.sim.runner import build_world

SCENARIO = {scenario_ref!r}
SEED = {seed!r}
CONFIG = json.loads(
    r"""
{config_json}
"""
)
PINS = {pins!r}
"""Pinned choices: [node, site, index, value]."""
ZERO_SITES = {zero_sites!r}
"""Every draw at these choice sites is 0, the canonical value."""
SIGNATURE = {signature!r}
FAILURE_MESSAGE = {message!r}


def test_regression_{test_name}():
    scenario = {loader}(SCENARIO)
    config = scenario.resolve_config(CONFIG)
    world = build_world(scenario, config, SEED)
    overrides = ChoicePins((((node, site, index), value) for node, site, index, value in PINS), ZERO_SITES)
    result = Simulation(scenario, world, overrides=overrides or None).run()
    assert result.failure is None, (
        f"fails with {{result.failure['signature']}} (recorded: {{SIGNATURE}}): {{result.failure['message']}}"
    )
'''


def pytest_source(result: MinimizeResult, scenario_target: str | None = None) -> str:
    """The text of the pytest file; ``scenario_target`` (``module:attr``) for unregistered scenarios."""
    summary = _summary(result)
    test_name = "".join(c if c.isalnum() else "_" for c in result.signature).strip("_").lower()
    source = _TEMPLATE.format(
        signature=result.signature,
        scenario=result.scenario,
        seed=result.seed,
        summary=_wrap(summary),
        loader="load_target" if scenario_target else "get_scenario",
        scenario_ref=scenario_target or result.scenario,
        config_json=json.dumps(result.config, indent=1, sort_keys=False, allow_nan=True),
        pins=[[*key, value] for key, value in sorted(result.pins.items())],
        zero_sites=list(result.zero_sites),
        message=result.failure.get("message", ""),
        test_name=test_name or "failure",
    )
    compile(source, "<repro>", "exec")
    return source


def _summary(result: MinimizeResult) -> str:
    summary = (
        f"{result.faults_before} faults shrank to {result.faults_after} "
        f"({', '.join(result.faults_kept) or 'none'}); {result.choices_before} non-canonical choices "
        f"to {result.choices_after}; {result.runs} runs."
    )
    changed = ", ".join(
        f"{name} {before} -> {after}" for name, (before, after) in result.params_changed.items()
    )
    if changed:
        summary += f" Shrunk: {changed}."
    return summary


def write_pytest(result: MinimizeResult, path: str | Path, scenario_target: str | None = None) -> str:
    """Write the pytest file and return its path."""
    target = Path(path)
    make_parent_folders(target)
    target.write_text(pytest_source(result, scenario_target))
    return str(target)


def _wrap(text: str, width: int = 100) -> str:
    lines: list[str] = []
    line = ""
    for word in text.split():
        if line and len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    lines.append(line)
    return "\n".join(lines)


# -- the repro that replays a recording ------------------------------------------------------------

_REPLAY_TEMPLATE = '''"""Minimal reproduction of {signature}: {scenario} seed {seed}, written by `timetravel minimize`.

{summary}
It replays branch {branch} of the repro recording {recording_name} from its snapshot at event #{start_events} ({start_time}),
taken before the first kept fault starts and while the run still equals the fault-free one (export
check: {start_check}), with the choices the recording pinned, and asserts that the run passes.
A regression test: while the bug is there it fails with the recorded signature; once the bug is
fixed it passes. Keep it. `timetravel replay` checks the recording bit for bit.
"""

from pathlib import Path

from timetravel.explore import Session
from timetravel.scenarios import {loader}
{setup_module}
RECORDING = Path(__file__).parent / {recording!r}
BRANCH = {branch!r}
SCENARIO = {scenario_ref!r}
START_EVENTS = {start_events!r}
"""The snapshot the run starts from (0: the beginning of the run)."""
SIGNATURE = {signature!r}
FAILURE_MESSAGE = {message!r}


def test_regression_{test_name}():
    with Session.open(RECORDING, scenario={loader}(SCENARIO), branch=BRANCH) as session:{setup_call}
        position = [snapshot.events for snapshot in session.snapshots()].index(START_EVENTS)
        world = session.snapshot_world(position)
        overrides = session.overrides_at(START_EVENTS)
        result = session.simulation(world, overrides=overrides, chain=False).run()
    assert result.failure is None, (
        f"fails with {{result.failure['signature']}} (recorded: {{SIGNATURE}}): {{result.failure['message']}}"
    )
'''


def replay_pytest_source(
    result: MinimizeResult,
    recording: str,
    start_events: int,
    scenario_target: str | None = None,
    branch: str = "main",
    launch: Launch = NO_LAUNCH,
) -> str:
    """The text of a pytest file that replays ``recording`` (a path relative to the test file's
    folder, or absolute) from the snapshot at ``start_events``; ``launch``: what the user named
    (the torch scenario's test runs the script the user named with --script)."""
    summary = _summary(result)
    test_name = "".join(c if c.isalnum() else "_" for c in result.signature).strip("_").lower()
    setup_module, setup_call = _scenario_setup(result, launch)
    source = _REPLAY_TEMPLATE.format(
        setup_module=setup_module,
        setup_call=f"\n        {setup_call}" if setup_call else "",
        signature=result.signature,
        scenario=result.scenario,
        seed=result.seed,
        summary=_wrap(summary),
        recording_name=Path(recording).name,
        recording=recording,
        branch=branch,
        start_events=start_events,
        start_time=format_time_auto(result.start_ns),
        start_check=result.start_check or "not run",
        loader="load_target" if scenario_target else "get_scenario",
        scenario_ref=scenario_target or result.scenario,
        message=result.failure.get("message", ""),
        test_name=test_name or "failure",
    )
    compile(source, "<repro>", "exec")
    return source


def _scenario_setup(result: MinimizeResult, launch: Launch) -> tuple[str, str]:
    """Module lines and an in-session call a scenario needs before its repro re-executes
    (``Scenario.repro_setup``: the torch scenario names the script the test runs)."""
    try:
        scenario = get_scenario(result.scenario)
    except UnknownScenarioError:
        return "", ""
    setup = getattr(scenario, "repro_setup", None)
    if setup is None:
        return "", ""
    module_lines, call = setup(result.config, launch)
    return f"{module_lines}\n", call


def write_replay_pytest(
    result: MinimizeResult,
    path: str | Path,
    recording: str | Path,
    start_events: int,
    scenario_target: str | None = None,
    *,
    branch: str = "main",
    launch: Launch = NO_LAUNCH,
) -> str:
    """Write the pytest file that replays ``recording`` (its ``branch``); it refers to the recording relative to
    its own folder when the recording lies under it (so the two can move together)."""
    target = Path(path)
    recording_path = Path(recording).resolve()
    folder = target.resolve().parent
    try:
        reference = str(recording_path.relative_to(folder))
    except ValueError:
        reference = str(recording_path)
    make_parent_folders(target)
    target.write_text(replay_pytest_source(result, reference, start_events, scenario_target, branch, launch))
    return str(target)
