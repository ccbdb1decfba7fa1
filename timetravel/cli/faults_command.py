"""``timetravel faults SCENARIO``: the fault schedule a seed draws, without running it.

Swarm testing draws the whole schedule at t=0, so it can be shown before anything runs. The JSON
form is itself a schedule: save it, delete or edit records, and run it with
``--set faults=@file.json`` (the informational ``expected`` and ``hits`` fields are ignored).
"""

from __future__ import annotations

import argparse
from typing import Any

from timetravel.cli.common import add_scenario_arguments, print_json, resolve_scenario
from timetravel.fabric import summary
from timetravel.sim.runner import build_world
from timetravel.sim.timefmt import format_time_auto


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "faults",
        help="show the fault schedule a seed draws (without running it)",
        description=(
            "Build the scenario's world for one seed and print its fault schedule: id, kind, target, "
            "window, parameters that differ from the defaults, and the expected outcome for a correct "
            "system. --json prints a schedule you can edit and pass back with --set faults=@file.json."
        ),
    )
    add_scenario_arguments(parser)
    parser.add_argument(
        "--scenario",
        dest="scenario_target",
        metavar="MODULE:ATTR",
        help="load the scenario from this module (your explicit opt-in to import it)",
    )
    parser.add_argument("--json", action="store_true", help='print {"scenario", "seed", "faults": [...]}')
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    scenario = resolve_scenario(args.scenario, args.scenario_target)
    config = scenario.resolve_config(args.settings)
    world = build_world(scenario, config, args.seed)
    faults = summary(world)["faults"]
    if args.json:
        print_json({"scenario": scenario.name, "seed": args.seed, "faults": faults})
        return 0
    if not faults:
        print(f"{scenario.name} seed {args.seed}: no faults")
        return 0
    print(f"{scenario.name} seed {args.seed}: {len(faults)} faults")
    for fault in faults:
        end = format_time_auto(fault["t_end"]) if fault["t_end"] is not None else "never"
        window = f"{format_time_auto(fault['t_start'])} .. {end}"
        print(f"  {fault['id']:<4} {fault['kind']:<10} {fault['target']:<8} {window:<28} {fault['expected']}")
        shown = _non_default_params(fault)
        if shown:
            print(f"       {shown}")
    return 0


def _non_default_params(fault: dict[str, Any]) -> str:
    from timetravel.fabric.schedule import PARAM_SPECS

    defaults = {name: default for name, (_, default) in PARAM_SPECS[fault["kind"]].items()}
    return " ".join(
        f"{name}={value}" for name, value in fault["params"].items() if value != defaults.get(name)
    )
