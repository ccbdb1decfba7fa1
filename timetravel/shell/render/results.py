"""Renderers for the command language's results (``timetravel.explore.results``) and the shell's own
(comparisons: :mod:`timetravel.shell.render.compare`).

Tables for rows (events, faults, fan-out buckets, the likelihood curve), trees for anything
hierarchical (a printed subtree, the branch tree, a diff grouped by path), one coloured line for
a cursor move. Times are shown exactly in the recording's display unit. A failure is always red
and names its kind, node, time and signature, because that line is what gets pasted into bug
reports.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from timetravel.explore import results as r
from timetravel.explore.commands.render import collective_text, fanout_heading
from timetravel.explore.minimize_trials import MinimizeResult
from timetravel.shell.render.plot import plot
from timetravel.shell.render.registry import RenderContext, renders
from timetravel.shell.results import PlotResult

BAR_WIDTH = 20
"""Cells of a rate bar (fan-out and likelihood tables)."""
PARAMS_WIDTH_MIN = 14
"""A fault's params column never narrows below this (it folds instead of hiding behind an ellipsis)."""


def plain_table(title: str | None = None, **options: Any) -> Table:
    """Tables look alike: a title on the left, a rule under the header, no boxes to paste around."""
    return Table(
        title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, **options
    )


def failure_text(failure: Mapping[str, Any] | None, context: RenderContext) -> Text:
    """``pass`` in green, or ``FAIL kind on node at T: message [signature]`` in red."""
    if failure is None:
        return Text("pass", style="green")
    text = Text(
        f"FAIL {failure.get('kind')} on {failure.get('node')} at {context.time(failure.get('t_ns'))}",
        style="bold red",
    )
    if failure.get("message"):
        text.append(f": {failure['message']}", style="red")
    if failure.get("signature"):
        text.append(f"  [{failure['signature']}]", style="dim")
    return text


def outcome_text(outcome: str, failure: Mapping[str, Any] | None, context: RenderContext) -> Text:
    if failure is not None:
        return failure_text(failure, context)
    return Text(outcome, style="green" if outcome == "pass" else "yellow")


def _bar(rate: float) -> Text:
    filled = round(max(0.0, min(rate, 1.0)) * BAR_WIDTH)
    return Text("█" * filled + "·" * (BAR_WIDTH - filled), style="red" if rate >= 1.0 else "yellow")


def _event_text(event: Mapping[str, Any] | None, context: RenderContext, in_progress: bool = False) -> str:
    if not event:
        return (
            "none yet (the recording is still being written)" if in_progress else "none (the run ends here)"
        )
    number = f"#{event['number']} " if event.get("number") is not None else ""
    return f"{number}at {context.time(event.get('t_ns'))}: {event.get('kind')} to {event.get('dst')}"


@renders(r.CursorResult)
def render_cursor(result: r.CursorResult, context: RenderContext) -> RenderableType:
    line = Text()
    line.append(result.branch, style="bold cyan")
    line.append(f"  {context.time(result.t_ns)}", style="bold yellow")
    line.append(f"  event #{result.event} of {result.events_total}")
    if result.in_progress:
        line.append(
            f"  (recording in progress: written up to {context.time(result.t_end_ns)} so far)", style="yellow"
        )
    else:
        line.append(f"  (run ends at {context.time(result.t_end_ns)})", style="dim")
    parts: list[RenderableType] = [line]
    if result.collective is not None:
        parts.append(Text(collective_text(result.collective, context.unit), style="green"))
    if result.note is not None:
        parts.append(Text(result.note, style="yellow"))
    parts.append(Text(f"next: {_event_text(result.next_event, context, result.in_progress)}", style="dim"))
    if result.failure is not None and result.failure_reached:
        parts.append(failure_text(result.failure, context))
    if result.watches:
        parts.append(_watchplain_table(result.watches))
    return Group(*parts)


def _watchplain_table(watches: Iterable[Any]) -> Table:
    table = plain_table("watches")
    table.add_column("path")
    table.add_column("value")
    table.add_column("changed")
    for watch in watches:
        table.add_row(
            watch.expression, watch.value, Text("changed", style="bold yellow") if watch.changed else ""
        )
    return table


@renders(r.EventsResult)
def render_events(result: r.EventsResult, context: RenderContext) -> RenderableType:
    table = plain_table(f"events on {result.branch}")
    for name, justify in (
        ("#", "right"),
        ("time", "right"),
        ("node", "left"),
        ("kind", "left"),
        ("payload", "left"),
    ):
        table.add_column(name, justify=justify, no_wrap=name != "payload")  # type: ignore[arg-type]
    for row in result.rows:
        style = "bold reverse" if row.number == result.cursor_event else ""
        table.add_row(str(row.number), context.time(row.t_ns), row.dst, row.kind, row.payload, style=style)
    if not result.rows:
        return Text(f"no events on {result.branch} match", style="dim")
    if result.omitted:
        table.caption = f"{result.omitted} more not shown (--count)"
    return table


@renders(r.PrintResult)
def render_print(result: r.PrintResult, context: RenderContext) -> RenderableType:
    tree = Tree(
        Text(f"{result.path or '/'}  on {result.branch} at {context.time(result.t_ns)}", style="bold")
    )
    stack: list[tuple[int, Tree, str]] = [(-1, tree, result.path.strip("/"))]
    for entry in result.entries:
        while stack[-1][0] >= entry.depth:
            stack.pop()
        label = Text(_relative_path(entry.path, stack[-1][2]), style="bold")
        label.append(f"  {entry.kind}", style="cyan")
        if entry.summary:
            label.append(f"  {entry.summary}")
        stack.append((entry.depth, stack[-1][1].add(label), entry.path))
    if result.omitted:
        tree.add(Text(f"… {result.omitted} more (--depth, or a narrower path)", style="dim"))
    return tree


def _relative_path(path: str, parent: str) -> str:
    """``path`` below ``parent`` (one entry of a wildcard print keeps its whole path: which node it is)."""
    if parent and path.startswith(parent + "/"):
        return path[len(parent) + 1 :]
    if path == parent:
        return path.rpartition("/")[2]
    return path or "/"


@renders(r.WatchResult)
def render_watch(result: r.WatchResult, context: RenderContext) -> RenderableType:
    parts: list[RenderableType] = []
    if result.message:
        parts.append(Text(result.message, style="" if result.found else "yellow"))
    if result.moved is not None:
        parts.append(render_cursor(result.moved, context))
    if result.watches:
        parts.append(_watchplain_table(result.watches))
    elif not result.message:
        parts.append(Text("no watches", style="dim"))
    return Group(*parts)


_FIND_VERBS = {"last-change": "last changed", "next-change": "next changes"}


@renders(r.FindResult)
def render_find(result: r.FindResult, context: RenderContext) -> RenderableType:
    cost = f"re-executed {result.replayed_events:,} events, checked {result.snapshots_checked} snapshots"
    if result.strategy and result.strategy not in _FIND_VERBS:
        cost += f" ({result.strategy})"
    if result.stopped_by is not None:
        return Text(f"{result.expression}: search stopped ({result.stopped_by}); {cost}", style="yellow")
    if not result.found or result.t_ns is None:
        never = "does not change" if result.strategy in _FIND_VERBS else "never holds"
        parts: list[RenderableType] = [
            Text(f"{result.expression} {never} on {result.branch}", style="yellow")
        ]
        if result.strategy == "bisect":
            parts.append(
                Text("bisecting snapshots misses what holds for a while only: try --scan", style="dim")
            )
        parts.append(Text(cost, style="dim"))
        return Group(*parts)
    text = Text(f"{result.expression} {_FIND_VERBS.get(result.strategy, 'first holds')} at ")
    text.append(context.time(result.t_ns), style="bold yellow")
    text.append(f" (event #{result.event}")
    if result.kind == "end":
        text.append(", the end-of-run checks")
    elif result.kind is not None:
        text.append(f", {result.kind} -> {result.node}")
    text.append(f") on {result.branch}")
    parts = [text]
    if result.witnesses:
        parts.append(Text("for " + ", ".join(result.witnesses), style="bold"))
    parts.append(Text(cost, style="dim"))
    return Group(*parts)


def _branch_line(branch: Any, context: RenderContext, current: bool = False) -> Text:
    text = Text(branch.name, style="bold cyan" if current else "bold")
    if current:
        text.append(" *", style="bold cyan")
    if branch.parent:
        text.append(f"  from {branch.parent} at {context.time(branch.at_ns)}", style="dim")
    if branch.changes:
        text.append(f"  {', '.join(branch.changes)}", style="magenta")
    text.append("  ")
    text.append_text(outcome_text(branch.outcome, branch.failure, context))
    return text


@renders(r.BranchResult)
def render_branch(result: r.BranchResult, context: RenderContext) -> RenderableType:
    line = _branch_line(result, context)
    detail = Text(f"{result.events} events, ends at {context.time(result.t_end_ns)}", style="dim")
    return Group(line, detail)


@renders(r.BranchesResult)
def render_branches(result: r.BranchesResult, context: RenderContext) -> RenderableType:
    """The branch tree: each branch under the one it was forked from."""
    names = {branch.name for branch in result.branches}
    tree = Tree(Text("branches", style="bold"), guide_style="dim")
    nodes: dict[str, Tree] = {}
    for branch in result.branches:
        parent = nodes.get(branch.parent) if branch.parent in names else tree
        nodes[branch.name] = (parent or tree).add(
            _branch_line(branch, context, branch.name == result.current)
        )
    return tree


@renders(r.FanoutResult)
def render_fanout(result: r.FanoutResult, context: RenderContext) -> RenderableType:
    heading = fanout_heading(result, context.time(result.at_ns))
    table = plain_table(f"{heading}: failure rate {result.failure_rate:.0%}")
    table.add_column("signature")
    table.add_column("futures", justify="right")
    table.add_column("share")
    for signature, count in sorted(result.by_signature.items(), key=lambda item: (-item[1], item[0])):
        share = count / result.samples if result.samples else 0.0
        table.add_row(
            Text(signature, style="green" if signature == "pass" else "red"), str(count), _bar(share)
        )
    return table


@renders(r.LikelihoodResult)
def render_likelihood(result: r.LikelihoodResult, context: RenderContext) -> RenderableType:
    table = plain_table(f"failure likelihood along {result.branch} ({result.samples} futures per snapshot)")
    table.add_column("from", justify="right")
    table.add_column("rate", justify="right")
    table.add_column("")
    for point in result.points:
        marker = "  ← point of no return" if point.at_ns == result.point_of_no_return_ns else ""
        bar = _bar(point.failure_rate)
        bar.append(marker, style="bold red")
        table.add_row(context.time(point.at_ns), f"{point.failure_rate:.0%}", bar)
    if result.point_of_no_return_ns is None:
        table.caption = "no snapshot from which every future fails"
    else:
        table.caption = f"point of no return: {context.time(result.point_of_no_return_ns)}"
    return table


@renders(r.FaultsResult)
def render_faults(result: r.FaultsResult, context: RenderContext) -> RenderableType:
    """One row per fault, a column per key; times in the display unit, ``t_start`` and ``t_start_ns`` alike."""
    if not result.faults:
        return Text(f"no faults on {result.branch}", style="dim")
    columns = list(dict.fromkeys(key.removesuffix("_ns") for fault in result.faults for key in fault))
    table = plain_table(f"faults on {result.branch}", padding=(0, 1, 0, 0))
    for column in columns:
        # Times keep their width; params fold rather than hide behind an ellipsis.
        if column == "params":
            table.add_column(column, min_width=PARAMS_WIDTH_MIN, overflow="fold")
        else:
            table.add_column(column, no_wrap=column.removesuffix("_ns") in TIME_KEYS)
    for fault in result.faults:
        cells = []
        for column in columns:
            key = column if column in fault else f"{column}_ns"
            cells.append(_fault_cell(key, fault.get(key), context))
        table.add_row(*cells)
    return table


TIME_KEYS = ("t_start", "t_end")
"""Fault keys that hold a time in ns without saying so (any key ending in ``_ns`` does too)."""


def _fault_cell(key: str, value: Any, context: RenderContext) -> str:
    if value is None:
        return ""
    if (key.endswith("_ns") or key in TIME_KEYS) and isinstance(value, int) and not isinstance(value, bool):
        return context.time(value)
    if isinstance(value, dict):
        return ", ".join(f"{name}={item}" for name, item in value.items())
    return str(value)


@renders(MinimizeResult)
def render_minimize(result: MinimizeResult, context: RenderContext) -> RenderableType:
    title = Text(f"minimized {result.signature}", style="bold")
    title.append(
        f"  in {result.runs} runs, {result.seconds:.1f} s (stopped by {result.stopped_by})", style="dim"
    )
    table = plain_table()
    table.add_column("")
    table.add_column("before", justify="right")
    table.add_column("after", justify="right")
    table.add_row("faults", str(result.faults_before), str(result.faults_after))
    table.add_row("non-canonical choices", str(result.choices_before), str(result.choices_after))
    for name, (before, after) in result.params_changed.items():
        table.add_row(name, str(before), str(after))
    parts: list[RenderableType] = [title, table]
    parts.append(Text(f"faults kept: {', '.join(result.faults_kept) or 'none'}", style="magenta"))
    parts.append(failure_text(result.failure, context))
    on_branch = f" (branch {result.repro_branch})" if result.repro_branch != "main" else ""
    parts += [Text(f"wrote {result.out}{on_branch}")] if result.out else []
    parts += [Text(f"wrote {result.pytest}")] if result.pytest else []
    if result.out:
        start = f"its test starts at event #{result.start_events} ({context.time(result.start_ns)}): {result.start_check}"
        parts.append(Text(f"the repro fails after {result.events:,} events; {start}", style="dim"))
    if result.partial:
        parts.append(Text(f"partial: stopped by {result.stopped_by}; the best result so far", style="yellow"))
    return Group(*parts)


@renders(r.ExportResult)
def render_export(result: r.ExportResult, context: RenderContext) -> RenderableType:
    return Text(
        f"wrote {result.trace_events} trace events ({result.bytes_written} bytes, {result.format}) to {result.path}"
    )


@renders(r.HelpResult)
def render_help(result: r.HelpResult, context: RenderContext) -> RenderableType:
    if result.detail:
        return Text(result.detail)
    table = plain_table(show_header=False)
    table.add_column("command", style="bold cyan")
    table.add_column("summary")
    for entry in result.entries:
        table.add_row(entry.name, entry.summary)
    table.caption = "help COMMAND for its options and examples"
    return table


@renders(PlotResult)
def render_plot(result: PlotResult, context: RenderContext) -> RenderableType:
    lines = plot(result.series, result.width, result.height, context.unit, result.log_y)
    title = Text(f"{result.metric}" + ("  (log scale)" if result.log_y else ""), style="bold")
    return Group(title, *lines)
