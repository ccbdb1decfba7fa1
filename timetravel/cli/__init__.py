"""``timetravel``: one entry point; each command lives in a module of its own in this package.

A command module defines ``register(subparsers)``, which adds its parser and sets
``func=main`` where ``main(args) -> int`` returns the exit code: 0 done (a passing run), 1 a
simulated failure (or a check that found one), 2 bad usage or input. Bad input is a one-line
``timetravel: error: ...`` on stderr, never a traceback: every error type that means "the user's
input is wrong" is listed in ``USER_ERRORS``, and any other OSError (no space left on a device, a
read-only folder, a parent path that is a file) is one line naming the path, exit code 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from timetravel.cli.common import USER_ERRORS, OneLineArgumentParser, UsageError

COMMAND_MODULES = (
    "timetravel.cli.scenarios_command",
    "timetravel.cli.run_command",
    "timetravel.cli.bench_command",
    "timetravel.cli.check_determinism_command",
    "timetravel.cli.faults_command",
    "timetravel.cli.replay_command",
    "timetravel.cli.inspect_command",
    "timetravel.cli.fuzz_command",
    "timetravel.cli.findings_command",
    "timetravel.cli.verify_command",
    "timetravel.cli.shell_command",
    "timetravel.cli.branch_command",
    "timetravel.cli.fanout_command",
    "timetravel.cli.compare_command",
    "timetravel.cli.rerun_command",
    "timetravel.cli.export_command",
    "timetravel.cli.minimize_command",
    "timetravel.cli.demo_seed_command",
    "timetravel.cli.tui_command",
)
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


def build_parser() -> argparse.ArgumentParser:
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
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        return int(args.func(args))
    except UsageError as error:
        return _error(str(error))
    except USER_ERRORS as error:
        return _error(str(error))
    except KeyboardInterrupt:
        print("timetravel: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        return 0
    except OSError as error:
        return _error(describe_os_error(error))


def describe_os_error(error: OSError) -> str:
    """An OSError the environment raised (no space left, a read-only folder, a parent that is a file,
    a directory where a file belongs) as one line naming the path, never a traceback."""
    if error.strerror is None:
        return str(error)
    paths = [str(name) for name in (error.filename, error.filename2) if name is not None]
    where = f"{' -> '.join(paths)}: " if paths else ""
    return f"{where}{error.strerror}"


def _error(message: str) -> int:
    first_line = message.strip().splitlines()[0] if message.strip() else "error"
    print(f"timetravel: error: {first_line}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
