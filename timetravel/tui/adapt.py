"""Turn the explore engine's results into the records the widgets show.

The command language returns result dataclasses (:mod:`timetravel.explore.results`); the TUI
renders each its own way: a branch tree from ``BranchesResult``, the likelihood row of the
timeline from ``LikelihoodResult``, the compare view from ``CompareResult`` and
``DiffCommandResult``. Every other result is shown as the command language's own text
(``render_text``) in the output pane. These functions only reshape; they compute nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from timetravel.explore import compare_results as c
from timetravel.explore import explain_results as x
from timetravel.explore import results as r
from timetravel.explore.branch_tree import OUTCOME_IN_PROGRESS
from timetravel.explore.commands.render import failure_text, link_head, site_lines
from timetravel.explore.commands.render_ops import ops_lines
from timetravel.explore.reference import ReferenceOverlay
from timetravel.sim.timefmt import format_time
from timetravel.tui.model import OUTCOMES, BranchInfo, CompareData, DiffEntry, Divergence
from timetravel.tui.widgets.explain_pane import ExplainRow


def failure_label(failure: dict[str, Any] | None, unit: str) -> str:
    """``nan on rank5 @1040ms``: what failed, where and when."""
    if not failure:
        return ""
    where = f" on {failure['node']}" if failure.get("node") else ""
    return f"{failure.get('kind', 'failure')}{where} @{format_time(int(failure.get('t_ns', 0)), unit)}"


def _outcome(text: str) -> str:
    if text == OUTCOME_IN_PROGRESS:
        return "running"
    return text if text in OUTCOMES else "unknown"


def branch_info(branch: r.BranchResult, unit: str) -> BranchInfo:
    is_root = branch.name == branch.parent or not branch.parent
    return BranchInfo(
        name=branch.name,
        parent=None if is_root else branch.parent,
        at_ns=None if is_root else branch.at_ns,
        outcome=_outcome(branch.outcome),
        failure=failure_label(branch.failure, unit),
        changes="; ".join(branch.changes),
    )


def branch_infos(result: r.BranchesResult, unit: str) -> tuple[BranchInfo, ...]:
    """The branch tree's rows (``main`` has no parent)."""
    return tuple(branch_info(branch, unit) for branch in result.branches)


def likelihood_points(result: r.LikelihoodResult) -> tuple[tuple[int, float], ...]:
    """``(t_ns, failure rate)`` per snapshot: the timeline's likelihood row."""
    return tuple((point.at_ns, point.failure_rate) for point in result.points)


def divergence(value: c.Divergence | None) -> Divergence | None:
    if value is None:
        return None
    return Divergence(value.t_ns, value.node, value.kind, value.event_a, value.event_b, value.event_t_ns)


def _side(side: c.RunSide, unit: str, changes: str = "") -> BranchInfo:
    return BranchInfo(
        side.name, outcome=_outcome(side.outcome), failure=failure_label(side.failure, unit), changes=changes
    )


def _curve(points: Sequence[Sequence[Any]]) -> tuple[tuple[int, float], ...]:
    return tuple((int(point[0]), float(point[1])) for point in points)


def compare_data(
    compare: c.CompareResult,
    diff: c.DiffCommandResult | None,
    unit: str,
    changes: dict[str, str] | None = None,
    loss_metric: str = "loss",
) -> CompareData:
    """The compare view's record: outcomes and divergence from ``compare``, paths from ``diff``;
    ``loss_metric`` is the curve drawn (the scenario's ``view.loss_metric``)."""
    changes = changes or {}
    diff = diff if diff is not None else compare.diff
    loss = compare.metrics.get(loss_metric, {})
    first = compare.first_divergence or (diff.first_divergence if diff is not None else None)
    at_ns = diff.at_ns if diff is not None else (first.t_ns if first is not None else 0)
    entries = (
        tuple(DiffEntry(entry.path, entry.change, entry.summary) for entry in diff.paths) if diff else ()
    )
    if diff is not None and diff.omitted:
        entries += (DiffEntry("…", "omitted", f"{diff.omitted} more paths differ"),)
    return CompareData(
        a=_side(compare.a, unit, changes.get(compare.a.name, "")),
        b=_side(compare.b, unit, changes.get(compare.b.name, "")),
        at_ns=at_ns,
        unit=unit,
        first_divergence=divergence(first),
        entries=entries,
        loss_a=_curve(loss.get("a", ())),
        loss_b=_curve(loss.get("b", ())),
        **_reference_fields(compare.reference or ()),
    )


def reference_verdict(laid: ReferenceOverlay) -> str:
    """``reference vs main: first step outside rtol 0.001: 106 (ref 0.0488, sim 0.0454)``."""
    title = f"reference vs {laid.branch}"
    if laid.missing is not None:
        return f"{title}: {laid.missing}"
    first = laid.first_outside_row
    if first is None:
        return f"{title}: all {laid.compared} compared steps within rtol {laid.rtol:g}"
    return (
        f"{title}: first step outside rtol {laid.rtol:g}: {first.step} "
        f"(ref {first.reference:.8g}, sim {first.simulated:.8g})"
    )


def _reference_fields(overlays: Sequence[ReferenceOverlay]) -> dict[str, Any]:
    """The compare view's reference overlay: verdicts and the three curves by step (a, b, file)."""
    if not overlays:
        return {}
    curves = [tuple((row.step, row.simulated) for row in laid.rows) for laid in overlays[:2]]
    file_rows = max(overlays[:2], key=lambda laid: len(laid.rows)).rows
    return {
        "reference": tuple(reference_verdict(laid) for laid in overlays),
        "reference_what": f"{overlays[0].metric} on {overlays[0].node} by step",
        "reference_curve": tuple((row.step, row.reference) for row in file_rows),
        "reference_a": curves[0],
        "reference_b": curves[1] if len(curves) > 1 else (),
    }


def diff_data(
    diff: c.DiffCommandResult, branches: Sequence[BranchInfo], unit: str, loss_metric: str = "loss"
) -> CompareData:
    """The compare view's record from a ``diff`` alone (outcomes from the branch tree)."""
    known = {branch.name: branch for branch in branches}
    sides = tuple(
        BranchInfo(
            name, outcome=known[name].outcome, failure=known[name].failure, changes=known[name].changes
        )
        if name in known
        else BranchInfo(name)
        for name in (diff.a, diff.b)
    )
    entries = tuple(DiffEntry(entry.path, entry.change, entry.summary) for entry in diff.paths)
    if diff.omitted:
        entries += (DiffEntry("…", "omitted", f"{diff.omitted} more paths differ"),)
    loss = diff.metrics.get(loss_metric, {})
    return CompareData(
        a=sides[0],
        b=sides[1],
        at_ns=diff.at_ns,
        unit=unit,
        first_divergence=divergence(diff.first_divergence),
        entries=entries,
        loss_a=_curve(loss.get("a", ())),
        loss_b=_curve(loss.get("b", ())),
        ops=tuple(ops_lines(diff.ops, unit)) if diff.ops is not None else (),
    )


def explain_rows(result: x.ExplainResult, unit: str) -> tuple[str, tuple[ExplainRow, ...]]:
    """The explain pane's headline (the failure) and one row per link of the chain."""
    if result.failure is None:
        return f"{result.branch}: pass: nothing to explain", ()
    rows = tuple(
        ExplainRow(
            role=link.role,
            event=link.event,
            t_ns=link.t_ns,
            head=link_head(link, unit),
            what=link.what,
            changes=tuple(f"{change.path}: {change.summary}" for change in link.changes),
            because=link.because,
        )
        for link in result.links
    )
    if result.site is not None:  # a torch run ends at its rank, step, batch and first non-finite module
        lines = site_lines(result.site)
        where = lines[0].partition(", ")
        rows += (
            ExplainRow("detector", None, result.failure.get("t_ns"), where[0], where[2], tuple(lines[1:])),
        )
    return f"{result.branch}: {failure_text(result.failure, unit)}", rows
