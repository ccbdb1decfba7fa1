"""``timetravel``: one entry point; each command lives in a module of its own in this package.

A command module defines ``register(subparsers)``, which adds its parser and sets
``func=main`` where ``main(args) -> int`` returns the exit code: 0 done (a passing run), 1 a
simulated failure (or a check that found one), 2 bad usage or input. Bad input is a one-line
``timetravel: error: ...`` on stderr, never a traceback: every error type that means "the user's
input is wrong" is one of ``common.user_errors()``.

Start-up is lazy: ``COMMANDS`` names every command with its one-line help, so ``timetravel --help``
lists them without importing any command module, and ``timetravel CMD ...`` imports only the
module of CMD. Importing every module cost 1.2-1.9 s before a command printed anything (numpy,
ml_dtypes, the explore and farm layers); tests/test_cli_startup.py checks that ``--help`` loads
none of numpy, textual, prompt_toolkit, dask or torch, and that this table says what the modules
register.

Any other OSError (no space left on a device, a
read-only folder, a parent path that is a file) is one line naming the path, exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NamedTuple

from timetravel.cli.common import OneLineArgumentParser, UsageError, user_errors
from timetravel.cli.interrupts import CommandSignals, stopped


class CommandEntry(NamedTuple):
    name: str
    module: str
    help: str
    aliases: tuple[str, ...] = ()


_PACKAGE = "timetravel.cli."
COMMANDS: tuple[CommandEntry, ...] = (
    CommandEntry(
        "scenarios", _PACKAGE + "scenarios_command", "list the scenarios, or one scenario's config keys"
    ),
    CommandEntry("run", _PACKAGE + "run_command", "run one seed of a scenario and report its outcome"),
    CommandEntry(
        "torchrun",
        _PACKAGE + "torchrun_command",
        "run your torch.distributed training script as N simulated ranks",
    ),
    CommandEntry(
        "python",
        _PACKAGE + "torchrun_command",
        "run a script that starts its own ranks (torch.multiprocessing.spawn): each one simulated",
    ),
    CommandEntry(
        "bench", _PACKAGE + "bench_command", "measure speed and memory against reference implementations"
    ),
    CommandEntry(
        "check-determinism",
        _PACKAGE + "check_determinism_command",
        "run each seed in several processes with different hash seeds and compare their hash chains",
    ),
    CommandEntry(
        "faults",
        _PACKAGE + "faults_command",
        "show the fault schedule a seed draws, or the one a recording ran with",
    ),
    CommandEntry(
        "replay",
        _PACKAGE + "replay_command",
        "re-execute a recording and verify its hash chain, snapshots and outcome",
    ),
    CommandEntry(
        "inspect", _PACKAGE + "inspect_command", "show the world of a recording at a time (or one state path)"
    ),
    CommandEntry(
        "fuzz",
        _PACKAGE + "fuzz_command",
        "run a sweep of seeds on local processes or a Dask cluster; failures go to a findings database",
    ),
    CommandEntry(
        "findings",
        _PACKAGE + "findings_command",
        "list the failing seeds of a sweep by signature; `findings merge` joins shard databases",
    ),
    CommandEntry(
        "verify",
        _PACKAGE + "verify_command",
        "re-run a findings bucket's seeds on today's code: fixed / still failing / new signature",
    ),
    CommandEntry(
        "shell",
        _PACKAGE + "shell_command",
        "the time-travel debugger's shell over a recording (interactive, -c or -x FILE)",
    ),
    CommandEntry(
        "branch",
        _PACKAGE + "branch_command",
        "run an alternate future of a recording from time T and store it in the recording",
    ),
    CommandEntry(
        "branches", _PACKAGE + "branch_command", "list the branches of a recording with their outcomes"
    ),
    CommandEntry(
        "fanout",
        _PACKAGE + "fanout_command",
        "run many futures from one moment and report the failure rate by signature",
    ),
    CommandEntry(
        "likelihood",
        _PACKAGE + "fanout_command",
        "the fan-out failure rate at every snapshot: where it jumps to 1 is the point of no return",
    ),
    CommandEntry(
        "compare",
        _PACKAGE + "compare_command",
        "two branches side by side: outcomes, metric curves, first divergence",
    ),
    CommandEntry(
        "diff",
        _PACKAGE + "compare_command",
        "the state diff of two branches at one time (default: at their first divergence)",
    ),
    CommandEntry(
        "explain",
        _PACKAGE + "explain_command",
        "why a branch failed: the causal chain from the detector back to its fault records",
    ),
    CommandEntry(
        "origin",
        _PACKAGE + "explain_command",
        "which event last wrote a state value, from what, and what caused that event",
    ),
    CommandEntry(
        "rerun",
        _PACKAGE + "rerun_command",
        "run the recorded seed, faults and choices on today's code and compare with the recording",
    ),
    CommandEntry(
        "export",
        _PACKAGE + "export_command",
        "export a recorded run as Chrome trace events, to open in Perfetto's UI",
    ),
    CommandEntry(
        "minimize",
        _PACKAGE + "minimize_command",
        "shrink a recorded failure to a minimal reproduction with the same signature",
    ),
    CommandEntry(
        "demo-seed",
        _PACKAGE + "demo_seed_command",
        "find a demo seed of dp_training's demo preset (or check one)",
    ),
    CommandEntry(
        "tui",
        _PACKAGE + "tui_command",
        "open a recording in the time-travel debugger (a terminal UI)",
        aliases=("open",),
    ),
)
COMMAND_MODULES = tuple(dict.fromkeys(entry.module for entry in COMMANDS))
EXIT_USAGE = 2


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser for ``argv``: the full parser of the command it names, a one-line stub for every
    other command (enough for ``--help`` and for argparse's "invalid choice" list). With no argv
    (``None``), every command module is imported and registered in full."""
    parser = OneLineArgumentParser(
        prog="timetravel",
        description=(
            "Deterministic simulation testing and a time-travel debugger for distributed training. "
            "One seed decides everything: run a simulated cluster, record it, rewind, branch and compare futures."
        ),
    )
    from timetravel import __version__

    parser.add_argument("--version", action="version", version=f"timetravel {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineArgumentParser)
    subparsers.required = True
    wanted = set(COMMAND_MODULES) if argv is None else _modules_named(argv)
    registered: set[str] = set()
    for entry in COMMANDS:
        if entry.module in wanted and entry.module not in registered:
            importlib.import_module(entry.module).register(subparsers)
            registered.add(entry.module)
        if entry.name not in subparsers.choices:
            subparsers.add_parser(entry.name, help=entry.help, aliases=list(entry.aliases), add_help=False)
    return parser


def _modules_named(argv: Sequence[str]) -> set[str]:
    """The module of the command ``argv`` names: its first word that is not an option (the top
    level's options, --help and --version, take no value)."""
    word = next((arg for arg in argv if not arg.startswith("-")), None)
    return {entry.module for entry in COMMANDS if word == entry.name or word in entry.aliases}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` names (None: the process's own command line, whose SIGINT and
    SIGTERM then stop it with exit code 130 or 143 at any moment: cli/interrupts.py)."""
    signals = CommandSignals() if argv is None else None
    if signals is not None:
        signals.install()
    try:
        return _run(list(sys.argv[1:] if argv is None else argv))
    finally:
        if signals is not None:
            signals.ending = True


def _run(arguments: list[str]) -> int:
    parser = build_parser(arguments)
    try:
        args = parser.parse_args(arguments)
        return int(args.func(args))
    except UsageError as error:
        return _error(str(error))
    except KeyboardInterrupt as stop:
        return stopped(stop)
    except BrokenPipeError:
        return 0
    except Exception as error:
        if isinstance(error, user_errors()):
            return _error(str(error))
        if isinstance(error, OSError):
            return _error(describe_os_error(error))
        raise


def describe_os_error(error: OSError) -> str:
    """An OSError the environment raised (no space left, a read-only folder, a parent that is a file,
    a directory where a file belongs) as one line naming the path, never a traceback."""
    if error.strerror is None:
        return str(error)
    paths = [str(name) for name in (error.filename, error.filename2) if name is not None]
    where = f"{' -> '.join(paths)}: " if paths else ""
    return f"{where}{error.strerror}"


def _error(message: str) -> int:
    """The one-line error: its first line, control characters escaped (a message may quote a
    recording or a database: sim/terminal_text.py)."""
    from timetravel.sim.terminal_text import terminal_safe

    first_line = message.strip().splitlines()[0] if message.strip() else "error"
    print(f"timetravel: error: {terminal_safe(first_line)}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
