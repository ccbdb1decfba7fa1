"""``timetravel scenarios [NAME]``: list the scenarios, or one scenario's config keys."""

from __future__ import annotations

import argparse
from typing import Any

from timetravel.cli.common import add_json_argument, print_json
from timetravel.scenarios import get_scenario, scenario_names
from timetravel.sim.timefmt import format_time


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "scenarios",
        help="list the scenarios, or one scenario's config keys",
        description="List every scenario that loads by name, or show one scenario's config keys and presets.",
    )
    parser.add_argument("name", nargs="?", help="show this scenario's config keys")
    add_json_argument(parser, "print JSON")
    parser.set_defaults(func=main)


def _default_text(kind: str, value: Any) -> str:
    if kind == "time":
        return format_time(value, "us") if value and value < 1_000_000 else format_time(value)
    return str(value)


def main(args: argparse.Namespace) -> int:
    if args.name is None:
        rows = [{"name": name, "summary": get_scenario(name).summary} for name in scenario_names()]
        if args.json:
            print_json(rows)
        else:
            width = max(len(row["name"]) for row in rows)
            for row in rows:
                print(f"{row['name']:<{width}}  {row['summary']}")
        return 0
    scenario = get_scenario(args.name)
    params = [
        {
            "name": p.name,
            "kind": p.kind,
            "default": p.default,
            "help": p.help,
            "choices": list(p.choices),
            "branchable": p.branchable,
            "shrinkable": p.shrinkable,
        }
        for p in scenario.params
    ]
    if args.json:
        print_json(
            {
                "name": scenario.name,
                "summary": scenario.summary,
                "params": params,
                "presets": {name: dict(values) for name, values in scenario.presets.items()},
            }
        )
        return 0
    print(f"{scenario.name}: {scenario.summary}\n")
    width = max((len(p["name"]) for p in params), default=4)
    for param in scenario.params:
        choices = f" [{'|'.join(param.choices)}]" if param.choices else ""
        branchable = " (branchable)" if param.branchable else ""
        branchable += " (shrinkable)" if param.shrinkable else ""
        default = _default_text(param.kind, param.default)
        print(f"  {param.name:<{width}}  {param.kind:<5} default {default}{choices}{branchable}")
        print(f"  {'':<{width}}  {param.help}")
    for name, values in scenario.presets.items():
        print(f"\npreset {name}: " + " ".join(f"{key}={value}" for key, value in values.items()))
    return 0
