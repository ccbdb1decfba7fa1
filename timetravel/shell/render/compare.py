"""Renderers for comparing two runs (``timetravel.explore.compare_results``) and for a state diff.

A comparison is a table of the two sides (outcome, end, last metric values), the first divergence
in one line, and the differing paths as a tree grouped by path segment (``nodes`` → ``rank3`` →
``weights``), each change coloured by kind.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text
from rich.tree import Tree

from timetravel.explore import compare_results as c
from timetravel.explore.commands.render import event_refs
from timetravel.explore.diff import DiffResult
from timetravel.explore.reference import overlay_lines
from timetravel.shell.render.registry import RenderContext, renders
from timetravel.shell.render.results import outcome_text, plain_table

CHANGE_STYLES = {"added": "green", "removed": "red", "changed": "yellow"}
"""How a changed path's kind of change is coloured."""


def _path_tree(title: Text, entries: Sequence[Mapping[str, Any]]) -> Tree:
    """Changes grouped by path segment, so ``nodes/rank3/weights`` sits under ``nodes`` → ``rank3``."""
    tree = Tree(title, guide_style="dim")
    branches: dict[str, Tree] = {}
    for entry in entries:
        segments = entry["path"].split("/") if entry["path"] else [""]
        parent, prefix = tree, ""
        for segment in segments[:-1]:
            prefix = f"{prefix}/{segment}" if prefix else segment
            if prefix not in branches:
                branches[prefix] = parent.add(Text(segment, style="bold"))
            parent = branches[prefix]
        label = Text(segments[-1] or "/", style="bold")
        label.append(f"  {entry['change']}", style=CHANGE_STYLES.get(entry["change"], "magenta"))
        label.append(f"  {entry['summary']}")
        parent.add(label)
    return tree


def _divergence_text(divergence: Any, context: RenderContext) -> Text:
    text = Text("first divergence: ", style="bold")
    text.append(context.time(divergence.t_ns), style="bold yellow")
    text.append(f" on {divergence.node}, {divergence.kind}")
    if getattr(divergence, "event_t_ns", None) is not None:  # t_ns: the collective's completion
        text.append(f" at {context.time(divergence.event_t_ns)}")
    text.append(f"  ({event_refs(divergence.event_a, divergence.event_b)})", style="dim")
    if divergence.reason:
        text.append(f"  {divergence.reason}", style="dim")
    return text


@renders(c.Divergence)
def render_divergence(result: c.Divergence, context: RenderContext) -> RenderableType:
    title = _divergence_text(result, context)
    if not result.changes:
        return title
    return _path_tree(title, result.changes)


@renders(c.CompareResult)
def render_compare(result: c.CompareResult, context: RenderContext) -> RenderableType:
    table = plain_table()
    table.add_column("")
    table.add_column(result.a.name, style="")
    table.add_column(result.b.name)
    table.add_row(
        "outcome",
        outcome_text(result.a.outcome, result.a.failure, context),
        outcome_text(result.b.outcome, result.b.failure, context),
    )
    table.add_row("ends at", context.time(result.a.t_end_ns), context.time(result.b.t_end_ns))
    for metric, sides in result.metrics.items():
        table.add_row(f"last {metric}", _last_value(sides.get("a")), _last_value(sides.get("b")))
    parts: list[RenderableType] = [table]
    if result.first_divergence is None:
        parts.append(Text("no divergence: the effects are identical", style="green"))
    else:
        parts.append(_divergence_text(result.first_divergence, context))
    if result.diff is not None:
        state = result.diff
        total = len(state.paths) + state.omitted
        title = Text(f"at {context.time(state.at_ns)} ({state.moment}): {total} paths differ", style="bold")
        if state.paths:
            parts.append(_path_tree(title, [entry.to_data() for entry in state.paths]))
        else:
            parts.append(title)
    for laid in result.reference or ():
        parts.append(_reference_text(laid))
    return Group(*parts)


def _reference_text(laid: Any) -> Text:
    """``compare --reference``: the CLI's lines, the verdict line red when a step is outside rtol."""
    lines = overlay_lines(laid)
    text = Text(lines[0], style="bold")
    for line in lines[1:]:
        style = "red" if "first step outside" in line or "<- first outside" in line else ""
        text.append("\n" + line, style=style)
    if laid.missing is None and laid.first_outside is None:
        text.stylize("green", len(text) - len(lines[-1]), len(text))
    return text


def _last_value(points: Sequence[Sequence[Any]] | None) -> str:
    if not points:
        return "-"
    value = points[-1][-1]
    return f"{value:.6g}" if isinstance(value, float) else f"{value}"


@renders(c.DiffCommandResult)
def render_diff_command(result: c.DiffCommandResult, context: RenderContext) -> RenderableType:
    title = Text(f"{result.a} vs {result.b} at ", style="bold")
    title.append(context.time(result.at_ns), style="bold yellow")
    if result.moment:
        title.append(f" ({result.moment})", style="dim")
    if not result.paths:
        return Group(title, Text("the states are bit-identical", style="green"))
    entries = [
        {"path": entry.path, "change": entry.change, "summary": entry.summary} for entry in result.paths
    ]
    parts: list[RenderableType] = []
    if result.first_divergence is not None:
        parts.append(_divergence_text(result.first_divergence, context))
    parts.append(_path_tree(title, entries))
    if result.omitted:
        parts.append(Text(f"… and {result.omitted} more changes (narrow with --path)", style="dim"))
    return Group(*parts)


@renders(DiffResult)
def render_diff(result: DiffResult, context: RenderContext) -> RenderableType:
    if not result.changes:
        return Text("equal", style="green")
    tree = _path_tree(Text("diff", style="bold"), [change.to_data() for change in result.changes])
    if result.omitted:
        return Group(tree, Text(f"… and {result.omitted} more changes", style="dim"))
    return tree


@renders(c.RerunResult)
def render_rerun(result: c.RerunResult, context: RenderContext) -> RenderableType:
    table = plain_table()
    table.add_column("")
    table.add_column("outcome")
    table.add_row("recorded", outcome_text(result.recorded_outcome, result.recorded_failure, context))
    table.add_row("today", outcome_text(result.outcome, result.failure, context))
    parts: list[RenderableType] = [table]
    if result.settings:
        parts.append(Text(f"with {' '.join(result.settings)}", style="magenta"))
    if result.first_divergence is None:
        parts.append(Text(f"{result.events} events, identical to the recording", style="green"))
    else:
        parts.append(_divergence_text(result.first_divergence, context))
    return Group(*parts)
