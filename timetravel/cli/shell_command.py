"""``timetravel shell PATH``: the gdb-like shell over a recording, interactive or batch.

Where the commands come from, in order: ``-c TEXT``, ``-x FILE`` (``-`` is stdin), the
standard input when it is not a terminal (``timetravel shell run.ttr < repro.tt``, or a pipe),
else the interactive REPL. Batch mode echoes each command after the prompt it ran at, so a
transcript reads like a typed session, and stops at the first command that fails.

Exit codes: 0 every command ran; 2 bad input — the recording is missing or damaged, the scenario
cannot be loaded, the script cannot be read, or a command was wrong; 1 a seek's re-execution
departed from the recording (as ``timetravel replay``); 130 stopped by Ctrl-C. Every error is one
line on stderr (``timetravel: error: -c:1: goto: ...``), never a traceback.

``--script PATH`` is the option every recording command shares: the torch script a torch recording
may re-execute. The shell's file of commands was ``--script FILE`` before that; a ``--script`` that
is not a ``.py`` file is still read as a file of commands, so older command lines keep working.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, TextIO

from timetravel.cli import common
from timetravel.cli.common import UsageError, add_json_argument
from timetravel.cli.output import say
from timetravel.cli.recording_common import add_scenario_target, name_recorded_script, script_use
from timetravel.explore.commands import CommandContext, open_context
from timetravel.recording.files import NotRegularFileError, open_regular

PROGRAM = "timetravel"
STDIN_SOURCE = "stdin"
SCRIPT_CHARS_MAX = 1_000_000
"""As the shell's script splitter (timetravel.shell.script); a test checks they agree."""
SCRIPT_BYTES_MAX = 4 * SCRIPT_CHARS_MAX
"""A script file larger than this is refused before it is read (at most 4 bytes a character)."""


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "shell",
        help="the time-travel debugger's shell over a recording (interactive, -c or -x FILE)",
        description=(
            "Open a recording and run commands of the command language (goto, step, back, where, events, "
            "print, watch, faults, branches, help, ... and the shell's plot and quit) at a prompt that shows "
            "the cursor's branch and time, with fuzzy completion (Tab) and persistent history. With -c or "
            "-x FILE, or with commands on standard input, run the commands in order and stop at the first "
            "that fails. Exit code 0 when every command ran, 2 on bad input (a missing or damaged recording, "
            "a wrong command), 1 when a seek's re-execution departs from the recording, 130 when stopped. "
            "Ctrl-C stops the running command, not the shell; Ctrl-D or quit leaves. See docs/shell.md."
        ),
    )
    parser.add_argument("path", metavar="PATH", help="a .ttr recording")
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "-c",
        dest="commands",
        metavar="TEXT",
        help='commands separated by ";" or new lines, e.g. "goto 950; print nodes/n3"',
    )
    source.add_argument(
        "-x",
        "--commands-file",
        dest="commands_file",
        metavar="FILE",
        help="a file of commands, one or more a line (# starts a comment line); - reads standard input "
        "(--script FILE, when FILE is not a .py file, is read as this, as before)",
    )
    add_json_argument(
        parser,
        'one JSON object a line per command: {"command": ..., "result": ...} or {"command": ..., "error": ...}',
    )
    parser.add_argument(
        "--no-history",
        action="store_true",
        help="keep this session's typed commands in memory only (default: the persistent history under "
        "$TIMETRAVEL_STATE_DIR, $XDG_STATE_HOME/timetravel or ~/.local/state/timetravel)",
    )
    add_scenario_target(parser)
    parser.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    # The shell's modules (rich, prompt_toolkit) load here, not when the CLI starts: every other
    # command would pay for them.
    from rich.console import Console

    from timetravel.shell.history import session_history
    from timetravel.shell.language import recording_engine
    from timetravel.shell.monitor import CommandMonitor
    from timetravel.shell.repl import Repl
    from timetravel.shell.runner import CommandRunner

    _split_script_option(args)
    script = _batch_input(args, sys.stdin)
    monitor = CommandMonitor(sys.stderr if sys.stderr.isatty() else None)
    with open_context(
        args.path,
        scenario_target=args.scenario_target,
        progress=monitor.progress,
        should_stop=monitor.should_stop,
    ) as context:
        _warn_about_damage(args.path, context)
        name_recorded_script(context.session, script_use(args))
        engine = recording_engine(context, user_errors=common.all_user_errors())
        console = Console(highlight=False, soft_wrap=args.json)
        errors = Console(stderr=True, highlight=False)
        if script is not None:
            text, source = script
            runner = CommandRunner(engine, console, errors, args.json, monitor, program=PROGRAM)
            return runner.run_script(text, source, echo=not args.json)
        runner = CommandRunner(engine, console, errors, args.json, monitor)
        return Repl(runner, session_history(persistent=not args.no_history)).run()


def _split_script_option(args: argparse.Namespace) -> None:
    """``--script FILE``: a torch script when FILE is a .py file, else (as before ``-x``) commands."""
    if args.torch_script is None or args.torch_script.endswith(".py"):
        return
    if args.commands is not None or args.commands_file is not None:
        raise UsageError("shell: --script FILE (a file of commands) and -c or -x: give one of them")
    args.commands_file, args.torch_script = args.torch_script, None


def _batch_input(args: argparse.Namespace, stdin: TextIO) -> tuple[str, str] | None:
    """(script text, its name for error locations), or None for the interactive REPL."""
    if args.commands is not None:
        return args.commands, "-c"
    if args.commands_file == "-" or (args.commands_file is None and not stdin.isatty()):
        return _read_bounded(stdin, STDIN_SOURCE), STDIN_SOURCE
    if args.commands_file is not None:
        return _read_script(Path(args.commands_file)), args.commands_file
    return None


def _read_script(path: Path) -> str:
    """A script file's text: a regular file of at most SCRIPT_BYTES_MAX bytes (a link to /dev/zero
    would read until memory ran out, /dev/urandom forever, and a FIFO block in open())."""
    try:
        with open_regular(path) as file:
            data = file.read(SCRIPT_BYTES_MAX + 1)
    except NotRegularFileError as error:
        raise UsageError(str(error)) from None
    if len(data) > SCRIPT_BYTES_MAX:
        raise UsageError(f"{path}: a script of more than {SCRIPT_BYTES_MAX:,} bytes")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path}: not a UTF-8 text file") from None
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _read_bounded(stream: TextIO, source: str) -> str:
    try:
        text = stream.read(SCRIPT_CHARS_MAX + 1)
    except UnicodeDecodeError:
        raise UsageError(f"{source}: not UTF-8 text") from None
    if len(text) > SCRIPT_CHARS_MAX:
        raise UsageError(f"{source}: a script of more than {SCRIPT_CHARS_MAX:,} characters")
    return text


def _warn_about_damage(path: str, context: CommandContext) -> None:
    """What a truncated or damaged recording lacks, one warning line each (it still opens)."""
    for line in context.session.info.loss:
        say(f"{PROGRAM}: warning: {path}: {line}", file=sys.stderr)
