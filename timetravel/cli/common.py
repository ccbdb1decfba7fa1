"""What every command shares: the one-line error parser, user-error types, output helpers."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, NoReturn

from timetravel.recording.files import NotRegularFileError
from timetravel.scenarios import UnknownScenarioError, get_scenario, load_target
from timetravel.sim.encoding import DecodeError
from timetravel.sim.guard import MODES, ModeError
from timetravel.sim.scenario import ConfigError, Scenario
from timetravel.sim.timefmt import TimeFormatError

SEED_MAX = 2**64 - 1
"""Seeds are unsigned 64-bit integers (the world stores its seed as plain data, msgpack's range)."""


def bounded_int(low: int, high: int) -> Any:
    """An argparse ``type`` for an integer option in ``low..high``, checked before any work (argparse
    names the option in its one-line error)."""

    def parse(text: str) -> int:
        try:
            value = int(text.replace("_", ""))
        except ValueError:
            raise argparse.ArgumentTypeError(f"takes an integer, got {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be in {low}..{high}, got {value}")
        return value

    return parse


class UsageError(Exception):
    """Bad usage or input: printed as one line, exit code 2."""


USER_ERRORS: tuple[type[BaseException], ...] = (
    ConfigError,
    UnknownScenarioError,
    TimeFormatError,
    ModeError,
    DecodeError,
    FileNotFoundError,
    IsADirectoryError,
    PermissionError,
    NotADirectoryError,
    NotRegularFileError,
)


def register_user_error(error_type: type[BaseException]) -> None:
    """Let a layer above declare its own "bad input" exception (e.g. a corrupt recording)."""
    global USER_ERRORS
    if error_type not in USER_ERRORS:
        USER_ERRORS = (*USER_ERRORS, error_type)
        import timetravel.cli as cli_package

        cli_package.USER_ERRORS = USER_ERRORS


class OneLineArgumentParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line naming the problem (and exit code 2)."""

    def error(self, message: str) -> NoReturn:
        where = "" if self.prog == "timetravel" else f"{self.prog.removeprefix('timetravel ')}: "
        print(f"timetravel: error: {where}{message} (see --help)", file=sys.stderr)
        sys.exit(2)


class _SeedAction(argparse.Action):
    """Store ``--seed`` and remember that it was given (a preset's own seed applies otherwise)."""

    def __call__(self, parser: Any, namespace: Any, values: Any, option_string: Any = None) -> None:
        if not 0 <= values <= SEED_MAX:
            parser.error(f"--seed must be in 0..{SEED_MAX} (64 bits), got {values}")
        setattr(namespace, self.dest, values)
        namespace.seed_given = True


def add_scenario_arguments(parser: argparse.ArgumentParser) -> None:
    """``SCENARIO``, ``--seed`` and ``--set k=v`` as every running command spells them."""
    parser.add_argument("scenario", metavar="SCENARIO", help="a scenario name (see `timetravel scenarios`)")
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        action=_SeedAction,
        help="the root seed that decides every choice (default: the preset's own seed if it has one, else 0)",
    )
    parser.set_defaults(seed_given=False)
    parser.add_argument(
        "--set",
        dest="settings",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config key (repeatable; applied after any preset). `timetravel scenarios NAME` lists the keys",
    )


def chosen_seed(args: argparse.Namespace, scenario: Scenario, config: dict[str, Any]) -> int:
    """``--seed`` when given, else the seed the chosen preset names (``Scenario.preset_seeds``), else 0."""
    return int(args.seed) if getattr(args, "seed_given", False) else scenario.default_seed(config)


def add_determinism_argument(parser: argparse.ArgumentParser) -> None:
    """``--determinism MODE``: the guard's mode for the scenario's handlers (docs/determinism.md)."""
    parser.add_argument(
        "--determinism",
        choices=MODES,
        default=None,
        help=(
            "what handlers see when they read the clock or global random: virtualize (simulated values, "
            "the default unless the scenario says otherwise), forbid (an error naming the call site), "
            "off (the real functions)"
        ),
    )


def resolve_scenario(name: str, target: str | None = None) -> Scenario:
    """A scenario by registered name, or from ``module:attr`` when the user asked for it explicitly."""
    if target:
        scenario = load_target(target)
        if scenario.name != name:
            raise UsageError(f"{target} is scenario {scenario.name!r}, not {name!r}")
        return scenario
    return get_scenario(name)


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, separators=(", ", ": "))
    sys.stdout.write("\n")
    sys.stdout.flush()
