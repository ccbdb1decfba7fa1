"""Renderers of ``explain`` (a causal chain, failure first, root last) and ``origin`` (who wrote a value)."""

from __future__ import annotations

from rich.console import Group, RenderableType
from rich.text import Text

from timetravel.explore import explain_results as x
from timetravel.explore.commands.render import link_head, site_lines
from timetravel.shell.render.registry import RenderContext, renders
from timetravel.shell.render.results import failure_text

ROLE_STYLES = {
    x.LINK_DETECTOR: "bold red",
    x.LINK_MESSAGE: "cyan",
    x.LINK_WRITE: "yellow",
    x.LINK_FAULT: "bold magenta",
    x.LINK_ROOT: "bold magenta",
}


@renders(x.ExplainResult)
def render_explain(result: x.ExplainResult, context: RenderContext) -> RenderableType:
    title = Text(f"explain {result.branch}: ", style="bold")
    if result.failure is None:
        return title.append("pass: nothing to explain", style="green")
    title.append_text(failure_text(result.failure, context))
    parts: list[RenderableType] = [title]
    for index, link in enumerate(result.links):
        line = Text("   " if index == 0 else "<- ", style="dim")
        line.append(link_head(link, context.unit), style=ROLE_STYLES.get(link.role, ""))
        line.append(f": {link.what}")
        parts.append(line)
        for change in link.changes:
            parts.append(Text(f"     {change.path}: {change.summary}", style="yellow"))
        if link.because:
            parts.append(Text(f"     because it {link.because}", style="dim"))
        if link.otherwise:
            parts.append(Text(f"     ({link.otherwise})", style="dim italic"))
    if not result.complete:
        parts.append(
            Text(f"(stopped on its budget after tracing {result.traced_events} events)", style="dim")
        )
    if result.site is not None:
        lines = site_lines(result.site)
        parts.append(Text(lines[0], style="bold red"))
        parts += [Text(line, style="yellow" if "non-finite" in line else "") for line in lines[1:]]
    return Group(*parts)


@renders(x.OriginResult)
def render_origin(result: x.OriginResult, context: RenderContext) -> RenderableType:
    title = Text(f"{result.path}", style="bold")
    title.append(f" on {result.branch} at {context.time(result.at_ns)}: ")
    if result.event is None:
        return title.append("as the world was built (no event wrote it)", style="dim")
    title.append(f"last written by #{result.event} at {context.time(result.t_ns)}", style="bold yellow")
    title.append(f": {result.kind} -> {result.node}")
    parts: list[RenderableType] = [title]
    parts += [Text(f"  {c.path}: {c.change} {c.summary}", style="yellow") for c in result.changes]
    if result.reads:
        parts.append(Text("  from: " + ", ".join(f"{r.path} ({r.value})" for r in result.reads), style="dim"))
    cause = f"#{result.caused_by}" if result.caused_by is not None else "the built world"
    parts.append(Text(f"  caused by {cause}", style="dim"))
    if result.faults_hit:
        parts.append(Text(f"  faults that acted in it: {', '.join(result.faults_hit)}", style="magenta"))
    parts += [Text(f"  log: {line}", style="dim") for line in result.log]
    return Group(*parts)
