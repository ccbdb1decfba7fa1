"""What every command shares: the one-line error parser, user-error types, output helpers.

This module imports nothing of the simulator at its top: ``timetravel --help`` loads it, and any
``timetravel.sim`` import pulls numpy and the kernel (see the start-up note in ``timetravel.cli``).
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from timetravel.sim.launch import Launch
    from timetravel.sim.scenario import Scenario

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


_BASE_USER_ERRORS = (
    ("timetravel.sim.scenario", "ConfigError"),
    ("timetravel.scenarios", "UnknownScenarioError"),
    ("timetravel.sim.timefmt", "TimeFormatError"),
    ("timetravel.sim.guard.state", "ModeError"),
    ("timetravel.sim.encoding", "DecodeError"),
    ("timetravel.sim.elided", "ElidedError"),
    ("timetravel.recording.format", "RecordingError"),
    ("timetravel.explore.paths", "PathError"),
    ("timetravel.explore.work", "ExploreError"),
    ("timetravel.explore.minimize_trials", "NothingToMinimize"),
    ("timetravel.determinism.checker", "SeedRangeError"),
    ("timetravel.determinism.processes", "CheckError"),
    ("timetravel.farm.verify", "BucketNotFoundError"),
    ("timetravel.farm.seeds", "SeedSpecError"),
    ("timetravel.farm.database", "FindingsDatabaseError"),
    ("timetravel.farm.executor", "FarmWorkerError"),
    ("timetravel.farm.dask_executor", "DaskSetupError"),
    ("timetravel.recording.files", "NotRegularFileError"),
)
"""Every layer's "bad input" errors, by module and name so that naming them imports nothing: an
exception of one of them can only exist once its module is loaded, so ``user_errors()`` looks
only at the modules already in ``sys.modules``. Listed here rather than registered by the command
modules, because only the module of the command being run is imported (timetravel.cli), and its
code may raise an error that another command's module used to register."""
_OS_USER_ERRORS: tuple[type[BaseException], ...] = (
    FileNotFoundError,
    IsADirectoryError,
    PermissionError,
    NotADirectoryError,
)


def user_errors() -> tuple[type[BaseException], ...]:
    """Every error type that means "the user's input is wrong" among the modules loaded so far."""
    found = [
        getattr(sys.modules[module], name)
        for module, name in _BASE_USER_ERRORS
        if module in sys.modules and hasattr(sys.modules[module], name)
    ]
    return (*found, *_OS_USER_ERRORS)


def all_user_errors() -> tuple[type[BaseException], ...]:
    """``user_errors()`` once every module that defines one is loaded: for the shell, which needs
    the whole tuple up front and whose commands reach every layer."""
    for module, _name in _BASE_USER_ERRORS:
        importlib.import_module(module)
    return user_errors()


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


SETTING_HELP = "set a config key (repeatable; applied after any preset)"
SCENARIO_MODULE_HELP = "load the scenario from this module (your explicit opt-in to import it)"


def add_settings_argument(parser: argparse.ArgumentParser, help_text: str = SETTING_HELP) -> None:
    """``--set KEY=VALUE``, repeatable, into ``args.settings``: the one spelling every command shares."""
    parser.add_argument(
        "--set", dest="settings", action="append", default=[], metavar="KEY=VALUE", help=help_text
    )


def add_scenario_module_argument(
    parser: argparse.ArgumentParser, help_text: str = SCENARIO_MODULE_HELP
) -> None:
    """``--scenario MODULE:ATTR`` into ``args.scenario_target``: the user's opt-in to import a scenario."""
    parser.add_argument("--scenario", dest="scenario_target", metavar="MODULE:ATTR", help=help_text)


def add_count_argument(
    parser: argparse.ArgumentParser,
    *flags: str,
    default: int,
    what: str,
    metavar: str | None = "N",
    dest: str | None = None,
) -> None:
    """An integer option (``flags``, first the preferred spelling) whose help says ``what`` it
    counts and its ``default``: ``"{what} (default {default})"``."""
    parser.add_argument(
        *flags, dest=dest, type=int, default=default, metavar=metavar, help=f"{what} (default {default})"
    )


JSON_HELP = "print one JSON object"


def add_json_argument(parser: argparse.ArgumentParser, help_text: str = JSON_HELP) -> None:
    """``--json``: the command prints JSON instead of text (``help_text`` says what it holds)."""
    parser.add_argument("--json", action="store_true", help=help_text)


def add_database_argument(parser: argparse.ArgumentParser) -> None:
    """``--db PATH``: the findings database of a sweep (``args.db``)."""
    from timetravel.farm import DEFAULT_DATABASE

    parser.add_argument(
        "--db",
        default=DEFAULT_DATABASE,
        metavar="PATH",
        help=f"findings database (default {DEFAULT_DATABASE})",
    )


def add_scenario_name_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("scenario", metavar="SCENARIO", help="a scenario name (see `timetravel scenarios`)")


def add_scenario_arguments(parser: argparse.ArgumentParser) -> None:
    """``SCENARIO``, ``--seed`` and ``--set k=v`` as every running command spells them."""
    add_scenario_name_argument(parser)
    parser.add_argument(
        "--seed",
        type=int,
        default=0,
        action=_SeedAction,
        help="the root seed that decides every choice (default: the preset's own seed if it has one, else 0)",
    )
    parser.set_defaults(seed_given=False)
    add_settings_argument(parser, f"{SETTING_HELP}. `timetravel scenarios NAME` lists the keys")


def add_seed_sweep_arguments(parser: argparse.ArgumentParser, seeds_help: str, settings_help: str) -> None:
    """``SCENARIO --seeds A:B [--set K=V]... [--scenario MODULE:ATTR]``: a command over many seeds,
    each run in a worker process (so the opt-in to import a module holds in every worker)."""
    add_scenario_name_argument(parser)
    parser.add_argument("--seeds", required=True, metavar="A:B", help=seeds_help)
    add_settings_argument(parser, settings_help)
    add_scenario_module_argument(parser, f"{SCENARIO_MODULE_HELP}, in every worker too")


def chosen_seed(args: argparse.Namespace, scenario: Scenario, config: dict[str, Any]) -> int:
    """``--seed`` when given, else the seed the chosen preset names (``Scenario.preset_seeds``), else 0."""
    return int(args.seed) if getattr(args, "seed_given", False) else scenario.default_seed(config)


def add_determinism_argument(parser: argparse.ArgumentParser) -> None:
    """``--determinism MODE``: the guard's mode for the scenario's handlers (docs/determinism.md)."""
    from timetravel.sim.guard import MODES

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
    from timetravel.scenarios import get_scenario, load_target

    if target:
        scenario = load_target(target)
        if scenario.name != name:
            raise UsageError(f"{target} is scenario {scenario.name!r}, not {name!r}")
        return scenario
    return get_scenario(name)


def named_scripts(scenario_name: str, settings: list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """Scripts named with ``--set script=PATH`` on this command line (a torch run's), else ()."""
    if scenario_name != "torch":
        return ()
    from timetravel.torch.world.specs import named_scripts as scripts_in

    return scripts_in(settings)


def launch_for(
    scenario_name: str, settings: list[str] | tuple[str, ...], *, executes: bool = True, output: Any = None
) -> Launch:
    """What this command line launches: the scripts named with ``--set script=PATH``, the user's
    opt-in to run them (sim/launch.py). A torch run executes its script only when the user named it
    here; a recording or a findings database that names a script never runs it on its own
    (docs/torch.md, "Trust"). A command that ``executes`` on a machine without torch stops here in one
    line, before any rank is started."""
    from timetravel.sim.launch import NO_LAUNCH

    if scenario_name != "torch":
        return NO_LAUNCH
    if executes:
        require_torch()
    from timetravel.torch.world.specs import launch_naming

    return launch_naming(named_scripts(scenario_name, settings), output)


SCRIPT_OPTION = "--script"
ALLOW_CHANGED_SCRIPT_OPTION = "--allow-changed-script"


def add_recorded_script_arguments(parser: argparse.ArgumentParser, *, executes: bool = True) -> None:
    """``--script PATH`` and ``--allow-changed-script`` on every command that opens a recording (the one
    definition). A torch recording re-executes only the script the user names here, and only if its
    sha256 is the recorded one; a command that never re-executes accepts them and ignores them, so one
    command line works for every command (docs/torch.md, "Re-executing a recording")."""
    parser.add_argument(
        SCRIPT_OPTION,
        dest="torch_script",
        metavar="PATH",
        help=(
            "a torch recording: the training script to re-execute (its sha256 must be the recorded one); "
            "a recording never runs the script it names by itself"
            if executes
            else "a torch recording: the training script (accepted for a uniform command line; this command "
            "only reads the stored state and runs nothing)"
        ),
    )
    parser.add_argument(
        ALLOW_CHANGED_SCRIPT_OPTION,
        action="store_true",
        help=(
            "with --script: run the script even though it changed since the recording (a replay of it "
            "then departs from the recording)"
            if executes
            else "accepted with --script and ignored (nothing runs)"
        ),
    )


def require_torch() -> None:
    """One line (exit 2) on a machine without torch, instead of a rank zygote that fails to start."""
    from timetravel.torch.world.recorded_script import torch_missing_message

    missing = torch_missing_message()
    if missing is not None:
        raise UsageError(missing)


def print_json(value: Any) -> None:
    json.dump(value, sys.stdout, separators=(", ", ": "))
    sys.stdout.write("\n")
    sys.stdout.flush()
