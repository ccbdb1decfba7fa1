"""Running a parsed command: one dispatch table from command name to the engine.

Every front end runs commands through :func:`execute` with a :class:`CommandContext` — the open
Session, a progress callback and a stop flag for long commands (a TUI worker's cancel button),
and the watch list. A handler turns the invocation's typed values into one engine call and
returns that call's result dataclass; it never prints. A command that cannot run (no recording
open, an unknown branch) raises :class:`CommandError` with one line that says why.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any

from timetravel.explore.branch_tree import branch_names
from timetravel.explore.commands.parse import CommandError, Invocation, parse, resolve_command
from timetravel.explore.commands.spec import COMMAND_SPECS
from timetravel.explore.results import HelpEntry, HelpResult
from timetravel.explore.session import Session
from timetravel.sim.elided import ElidedError
from timetravel.sim.timefmt import DISPLAY_UNIT_DEFAULT

Handler = Callable[[Invocation, "CommandContext"], Any]


@dataclass
class CommandContext(AbstractContextManager["CommandContext"]):
    """What commands run against. ``session`` is None until a recording is open."""

    session: Any = None
    progress: Callable[[Any], None] | None = None
    should_stop: Callable[[], bool] | None = None
    watches: list[str] = field(default_factory=list)
    """Watched paths, in the order they were added (at most WATCHES_MAX)."""
    watch_digests: dict[str, bytes] = field(default_factory=dict)
    """Each watch's value digest when it was last shown: what ``changed`` compares with."""

    @property
    def display_unit(self) -> str:
        return getattr(self.session, "display_unit", DISPLAY_UNIT_DEFAULT)

    def require_session(self, command: str) -> Any:
        if self.session is None:
            raise CommandError(f"{command}: no recording is open")
        return self.session

    def switch_branch(self, name: str, command: str = "goto") -> Any:
        """Make ``name`` the cursor's branch (a Session on it, cursor at its start); returns it."""
        session = self.require_session(command)
        if name == session.branch:
            return session
        known = branch_names(session.reader)
        if name not in known:
            raise CommandError(f"{command}: no branch {name!r} (branches: {', '.join(known)})")
        return self.reopen(name)

    def reopen(self, branch: str | None = None) -> Any:
        """Open the recording again (on ``branch``, default the current one) and close the old
        Session: after a branch was appended to the file, or to switch branches. The cursor
        starts at the branch's beginning; watches stay."""
        old = self.require_session("reopen")
        new = Session.open(
            old.reader.path, scenario=old.scenario, branch=branch or old.branch, launch=old.launch
        )
        old.close()
        self.session = new
        self.watch_digests.clear()
        return new

    def close(self) -> None:
        if self.session is not None:
            self.session.close()
            self.session = None

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def _help(invocation: Invocation, context: CommandContext) -> HelpResult:
    name = invocation.value("command")
    if name is None:
        entries = tuple(HelpEntry(spec.name, spec.usage, spec.summary) for spec in COMMAND_SPECS)
        return HelpResult(entries)
    spec = resolve_command(name)
    return HelpResult((HelpEntry(spec.name, spec.usage, spec.summary),), spec.help_detail)


HANDLERS: dict[str, Handler] = {"help": _help}
"""Command name -> handler. Commands over a recording register here (see register_handler)."""


def register_handler(name: str, handler: Handler) -> None:
    """Attach the handler of a command whose spec exists (each engine module adds its own)."""
    resolve_command(name)
    HANDLERS[name] = handler


def execute(invocation: Invocation, context: CommandContext) -> Any:
    """Run one parsed command and return its result dataclass. A command that reads a tensor a
    recording keeps as digests only (sim/elided.py) runs again with the values rebuilt by
    re-execution (``Session.read_values``), or says in one line that it needs the script."""
    handler = HANDLERS.get(invocation.name)
    if handler is None:
        context.require_session(invocation.name)
        raise CommandError(f"{invocation.name}: not available in this build")
    if context.session is None:
        return handler(invocation, context)
    try:
        return context.session.read_values(lambda: handler(invocation, context))
    except ElidedError as error:
        raise CommandError(
            f"{invocation.name}: {error} (name the script with --script to rebuild it)"
        ) from None


def run_line(text: str, context: CommandContext) -> Any:
    """Parse and run one command line (the shell's and the TUI's command line call this)."""
    return execute(parse(text, context.display_unit), context)
