"""The command palette (ctrl+p) lists the same commands as the command line.

The entries are the command language's own specs (``COMMAND_SPECS``), so the palette, the ``:``
completion and ``help`` never disagree. Choosing a command that needs an argument puts
``name `` on the command line for the user to finish; one that needs none runs at once.
"""

from __future__ import annotations

from functools import partial
from typing import Protocol, runtime_checkable

from textual.command import DiscoveryHit, Hit, Hits, Provider

from timetravel.explore.commands import COMMAND_SPECS, CommandSpec


@runtime_checkable
class CommandHost(Protocol):
    """What the palette needs from the App."""

    def prefill_command(self, text: str) -> None: ...

    def submit_command(self, text: str) -> None: ...


def needs_input(spec: CommandSpec) -> bool:
    """True when the command cannot run without an argument the user must type."""
    return any(argument.required for argument in spec.arguments)


class CommandsProvider(Provider):
    """Palette entries for the command language."""

    def _choose(self, spec: CommandSpec) -> None:
        host = self.app
        if not isinstance(host, CommandHost):
            return
        if needs_input(spec) or (spec.options and not spec.arguments and spec.name in PREFILLED):
            host.prefill_command(spec.name + " ")
        else:
            host.submit_command(spec.name)

    async def discover(self) -> Hits:
        for spec in COMMAND_SPECS:
            yield DiscoveryHit(spec.name, partial(self._choose, spec), help=spec.summary)

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for spec in COMMAND_SPECS:
            score = matcher.match(spec.name)
            if score > 0:
                yield Hit(score, matcher.highlight(spec.name), partial(self._choose, spec), help=spec.summary)


PREFILLED = ("branch", "events", "fanout", "minimize", "export")
"""Commands that run without arguments but are usually given options: the palette prefills them."""
