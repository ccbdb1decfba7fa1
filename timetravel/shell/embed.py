"""The shell from Python: a script, a test or a Jupyter notebook runs the shell's commands.

::

    from timetravel.shell import Shell
    with Shell.open("recordings/needle-0.ttr") as shell:
        shell("goto 20; print nodes/w3")     # shows each result as the shell does (tables, trees, plots)
        cursor = shell.run("where")          # returns the result dataclass, shows nothing
        shell.session.world.nodes["w3"]      # the Session itself, for anything the language lacks
        shell.complete("print nodes/w3/t")   # ["nodes/w3/total"]

It is the REPL without the prompt: the same engine (the command language's handlers, plus
``plot`` and ``help``), the same renderers, a rich ``Console`` — which, inside Jupyter, draws
the tables and plots as HTML in the cell's output. Errors are exceptions (a ``CommandError`` for
a wrong command, ``ReplayDivergence`` for a seek that departs from the recording): in Python the
caller decides what a failure means.

``shell(text)`` returns None on purpose: a notebook shows a cell's last value, and the result has
already been drawn; :attr:`Shell.last` keeps it, and :meth:`Shell.run` returns it.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from rich.console import Console

from timetravel.explore.commands import CommandContext, open_context
from timetravel.recording.catalog import MAIN_BRANCH
from timetravel.shell.completion import complete
from timetravel.shell.language import LanguageEngine, recording_engine
from timetravel.shell.prompt import prompt_text
from timetravel.shell.render import RenderContext, render
from timetravel.shell.render.safe_console import terminal_safe_console
from timetravel.shell.script import split_commands
from timetravel.sim.scenario import Scenario


class Shell(AbstractContextManager["Shell"]):
    """The shell's commands over one open recording, for Python callers (see the module docstring)."""

    def __init__(self, context: CommandContext, console: Console | None = None) -> None:
        self.context = context
        self.engine: LanguageEngine = recording_engine(context)
        self.console = terminal_safe_console(console if console is not None else Console())
        self.last: object = None
        """The result of the last command run."""

    @classmethod
    def open(
        cls,
        path: str | Path,
        *,
        scenario_target: str | None = None,
        scenario: Scenario | None = None,
        branch: str = MAIN_BRANCH,
        console: Console | None = None,
        progress: Callable[[Any], None] | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Shell:
        """Open a recording (the arguments of ``open_context``); the cursor starts at #0 of ``branch``."""
        context = open_context(
            path,
            scenario_target=scenario_target,
            scenario=scenario,
            branch=branch,
            progress=progress,
            should_stop=should_stop,
        )
        return cls(context, console)

    @property
    def session(self) -> Any:
        """The open Session (it follows branch switches: ``goto T --branch b1`` opens another)."""
        return self.context.session

    @property
    def prompt(self) -> str:
        """Where the cursor stands, as the shell's prompt shows it: ``[main 20ms #102]> ``."""
        return prompt_text(self.engine.prompt_state())

    def run(self, text: str) -> object:
        """Run the commands of ``text`` (``;`` or new lines between them); the last one's result."""
        for command in split_commands(text, "python"):
            self.last = self.engine.execute(command.text)
        return self.last

    def __call__(self, text: str) -> None:
        """Run the commands of ``text`` and show each result as the shell does."""
        for command in split_commands(text, "python"):
            self.last = self.engine.execute(command.text)
            self.show(self.last)

    def show(self, result: object) -> None:
        renderable = render(result, RenderContext(self.engine.display_unit, self.console.width))
        if renderable is not None:
            self.console.print(renderable)

    def complete(self, text: str) -> list[str]:
        """What Tab offers at the end of ``text``, best first."""
        source = self.engine.completion_source()
        return [item.text for item in complete(text, self.engine.vocabulary, source)]

    def close(self) -> None:
        self.context.close()

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        if self.context.session is None:
            return "<Shell (closed)>"
        return f"<Shell {self.context.session.reader.path} {self.prompt.rstrip().removesuffix('>')}>"
