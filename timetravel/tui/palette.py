"""The command palette (ctrl+p) lists the same commands as the command line.

The provider reads the commands from the App (``command_specs``), so the palette, the ``:``
completion and the ``?`` screen never disagree. Choosing a command that takes no argument runs
it; choosing one that does puts ``name `` on the command line for the user to finish.
"""

from __future__ import annotations

from functools import partial
from typing import Protocol

from textual.command import DiscoveryHit, Hit, Hits, Provider

from timetravel.tui.model import CommandSpec


class CommandHost(Protocol):
    """What the palette needs from the App."""

    command_specs: tuple[CommandSpec, ...]

    def prefill_command(self, text: str) -> None: ...

    def submit_command(self, text: str) -> None: ...


class CommandsProvider(Provider):
    """Palette entries for the command language."""

    def _host(self) -> CommandHost | None:
        app = self.app
        return app if hasattr(app, "command_specs") else None  # type: ignore[return-value]

    def _choose(self, spec: CommandSpec) -> None:
        host = self._host()
        if host is None:
            return
        if spec.arguments:
            host.prefill_command(spec.name + " ")
        else:
            host.submit_command(spec.name)

    async def discover(self) -> Hits:
        host = self._host()
        for spec in host.command_specs if host else ():
            yield DiscoveryHit(f":{spec.usage}", partial(self._choose, spec), help=spec.summary)

    async def search(self, query: str) -> Hits:
        host = self._host()
        matcher = self.matcher(query)
        for spec in host.command_specs if host else ():
            text = f":{spec.usage}"
            score = matcher.match(f"{spec.name} {spec.summary}")
            if score > 0:
                yield Hit(
                    score, matcher.highlight(text), partial(self._choose, spec), text=text, help=spec.summary
                )
