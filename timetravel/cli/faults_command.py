"""``timetravel faults SCENARIO`` or ``timetravel faults PATH.ttr``: a fault schedule.

With a scenario name: the schedule a seed draws, without running it. Swarm testing draws the
whole schedule at t=0, so it can be shown before anything runs. The JSON form is itself a
schedule: save it, delete or edit records, and run it with ``--set faults=@file.json`` (the
informational ``expected`` and ``hits`` fields are ignored).

With a recording (a path ending in ``.ttr``, or any existing file): the schedule of one of its
branches (``--branch``, default ``main``) as it ran — the records in the world at the branch's
end, with how many times each fault acted (``hits``). A branch that dropped or added faults
shows its own schedule.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from timetravel.cli.common import (
    add_json_argument,
    add_recorded_script_arguments,
    add_scenario_arguments,
    add_scenario_module_argument,
    chosen_seed,
    launch_for,
    print_json,
    resolve_scenario,
)
from timetravel.cli.output import say, warn
from timetravel.cli.recording_common import name_recorded_script, script_use
from timetravel.explore.commands.binding import open_context
from timetravel.explore.view import fault_schedule
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.sim.runner import build_world
from timetravel.sim.scenario import ConfigError
from timetravel.sim.timefmt import format_time_auto

RECORDING_SUFFIX = ".ttr"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "faults",
        help="show the fault schedule a seed draws, or the one a recording ran with",
        description=(
            "SCENARIO: build the scenario's world for one seed and print its fault schedule: id, kind, "
            "target, window, parameters that differ from the defaults, and the expected outcome for a "
            "correct system. --json prints a schedule you can edit and pass back with --set "
            "faults=@file.json. PATH.ttr: print the schedule a recorded branch ran with (--branch, "
            "default main), with how often each fault acted."
        ),
    )
    add_scenario_arguments(parser)
    parser.set_defaults(seed=None)
    parser.add_argument(
        "--branch", metavar="B", default=None, help="with a recording: the branch (default main)"
    )
    add_recorded_script_arguments(parser, executes=False)
    add_scenario_module_argument(parser)
    add_json_argument(
        parser, 'print {"scenario", "seed", "faults": [...]} (a recording adds "recording" and "branch")'
    )
    parser.set_defaults(func=main)


def is_recording(text: str) -> bool:
    """A recording path rather than a scenario name (scenario names hold no dots or slashes)."""
    return text.endswith(RECORDING_SUFFIX) or Path(text).is_file()


def main(args: argparse.Namespace) -> int:
    if is_recording(args.scenario):
        return _recording(args)
    if args.branch is not None:
        raise ConfigError("--branch applies to a recording (PATH.ttr), not a scenario")
    scenario = resolve_scenario(args.scenario, args.scenario_target)
    launch = launch_for(scenario.name, args.settings, executes=False)
    config = scenario.resolve_config(args.settings)
    seed = chosen_seed(args, scenario, config)
    world = build_world(scenario, config, seed, launch)
    faults = list(fault_schedule(world))
    if args.json:
        print_json({"scenario": scenario.name, "seed": seed, "faults": faults})
        return 0
    _print_schedule(f"{scenario.name} seed {seed}", faults, hits=False)
    return 0


def _recording(args: argparse.Namespace) -> int:
    if args.seed is not None or args.settings:
        raise ConfigError("--seed and --set apply to a scenario; a recording has its own")
    branch = args.branch or MAIN_BRANCH
    with open_context(args.scenario, scenario_target=args.scenario_target, branch=branch) as context:
        session = context.session
        for line in session.info.loss:
            warn(args.scenario, line)
        name_recorded_script(session, script_use(args))
        session.goto("end")
        faults = list(fault_schedule(session.world))
        info = session.info
    if args.json:
        print_json(
            {
                "recording": args.scenario,
                "branch": branch,
                "scenario": info.scenario,
                "seed": info.seed,
                "faults": faults,
            }
        )
        return 0
    _print_schedule(f"{args.scenario} ({info.scenario} seed {info.seed}) branch {branch}", faults, hits=True)
    return 0


def _print_schedule(title: str, faults: list[dict[str, Any]], *, hits: bool) -> None:
    if not faults:
        say(f"{title}: no faults")
        return
    say(f"{title}: {len(faults)} faults")
    for fault in faults:
        end = format_time_auto(fault["t_end"]) if fault.get("t_end") is not None else "never"
        window = f"{format_time_auto(fault['t_start'])} .. {end}"
        acted = f"  hits {fault.get('hits', 0)}" if hits else ""
        say(
            f"  {fault['id']:<4} {fault['kind']:<10} {fault['target']!s:<8} {window:<28} "
            f"{fault.get('expected', '')}{acted}"
        )
        shown = _non_default_params(fault)
        if shown:
            say(f"       {shown}")


def _non_default_params(fault: dict[str, Any]) -> str:
    from timetravel.fabric.fault_kinds import PARAM_SPECS

    specs = PARAM_SPECS.get(fault["kind"], {})
    defaults = {name: default for name, (_, default) in specs.items()}
    return " ".join(
        f"{name}={value}" for name, value in fault.get("params", {}).items() if value != defaults.get(name)
    )
