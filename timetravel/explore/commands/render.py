"""Plain-text rendering of command results: the CLI's human output and the shell's batch mode.

Rich front ends (the TUI's widgets, the shell's tables) render the result dataclasses their own
way; this is the one plain rendering, so every result reads the same in a terminal, a script's
log and a bug report. Times are shown in the recording's display unit.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timetravel.explore import compare_results as c
from timetravel.explore import explain_results as x
from timetravel.explore import results as r
from timetravel.explore.commands.render_memory import uninitialised_lines
from timetravel.explore.commands.render_ops import ops_lines
from timetravel.explore.minimize_trials import MinimizeResult
from timetravel.explore.reference import overlay_lines
from timetravel.sim.terminal_text import terminal_safe
from timetravel.sim.timefmt import DISPLAY_UNIT_DEFAULT, format_time

FANOUT_KEYS_SHOWN = 10


def failure_text(failure: dict[str, Any] | None, unit: str) -> str:
    if failure is None:
        return "pass"
    where = f" on {failure['node']}" if failure.get("node") else ""
    return f"FAIL {failure['signature']}{where} at {format_time(failure['t_ns'], unit)}: {failure['message']}"


def outcome_text(outcome: str, failure: dict[str, Any] | None, unit: str) -> str:
    """``failure_text`` for a run that ended; the outcome itself (``in progress``, ``unknown``) for
    one with no END frame, which must never read as ``pass``."""
    if failure is None and outcome not in ("pass", "fail"):
        return outcome
    return failure_text(failure, unit)


def collective_text(collective: dict[str, Any], unit: str) -> str:
    """``completed all_reduce 0#7 (group 0, seq 7) at 1.62ms, the 7th collective``."""
    return (
        f"completed {collective['op']} {collective['key']} (group {collective['group']}, seq "
        f"{collective['seq']}) at {format_time(collective['t_done_ns'], unit)}; "
        f"{collective['completed']} collectives completed so far"
    )


def _cursor(result: r.CursorResult, unit: str) -> list[str]:
    ends = (
        f"in progress: written up to {format_time(result.t_end_ns, unit)} so far"
        if result.in_progress
        else f"ends at {format_time(result.t_end_ns, unit)}"
    )
    lines = [
        f"{result.branch} at {format_time(result.t_ns, unit)}, event #{result.event} of {result.events_total} "
        f"({ends})"
    ]
    if result.collective is not None:
        lines.append(f"  {collective_text(result.collective, unit)}")
    if result.note is not None:
        lines.append(f"  {result.note}")
    if result.next_event is not None:
        event = result.next_event
        lines.append(
            f"  next: {event.get('kind')} -> {event.get('dst')} at {format_time(event.get('t_ns', 0), unit)}"
        )
    if result.failure is not None and result.failure_reached:
        lines.append(f"  {failure_text(result.failure, unit)}")
    lines += [
        f"  watch {w.expression} = {w.value}{'  (changed)' if w.changed else ''}" for w in result.watches
    ]
    return lines


def _events(result: r.EventsResult, unit: str) -> list[str]:
    lines = [
        f"{'>' if row.number == result.cursor_event else ' '} #{row.number:<8} {format_time(row.t_ns, unit):>14}  "
        f"{row.dst:<12} {row.kind:<14} {row.payload}"
        for row in result.rows
    ]
    if result.omitted:
        lines.append(f"  ... {result.omitted} more")
    return lines or ["no events"]


def _print(result: r.PrintResult, unit: str) -> list[str]:
    lines = [f"{result.path or '/'} on {result.branch} at {format_time(result.t_ns, unit)}"]
    wildcard = "*" in result.path
    lines += [
        "  " * (entry.depth + 1)
        + f"{entry.path if wildcard and entry.depth == 0 else entry.path.rsplit('/', 1)[-1]}: {entry.summary}"
        for entry in result.entries
    ]
    if result.omitted:
        lines.append(f"  ... {result.omitted} more")
    return lines


def _watch(result: r.WatchResult, unit: str) -> list[str]:
    lines = [result.message] if result.message else []
    if result.moved is not None:
        lines += _cursor(result.moved, unit)
    lines += [f"  watch {w.expression} = {w.value}" for w in result.watches]
    return lines or ["no watches"]


_FIND_VERBS = {"last-change": "last changed", "next-change": "next changes"}


def _find(result: r.FindResult, unit: str) -> list[str]:
    verb = _FIND_VERBS.get(result.strategy, "first holds")
    cost = f"re-executed {result.replayed_events} events, {result.snapshots_checked} snapshots checked"
    if result.stopped_by is not None:
        return [f"{result.expression}: search stopped ({result.stopped_by}) after {cost} on {result.branch}"]
    if not result.found or result.t_ns is None:
        never = "never holds" if result.strategy not in _FIND_VERBS else "does not change"
        lines = [f"{result.expression}: {never} on {result.branch} ({cost})"]
        if result.strategy == "bisect":
            lines.append("  (bisecting snapshots misses a predicate that holds for a while only: try --scan)")
        return lines
    if result.kind == "end":
        what = "the end-of-run checks"
    elif result.kind is not None:
        what = f"{result.kind} -> {result.node}"
    else:
        what = "the initial state"
    line = (
        f"{result.expression}: {verb} at {format_time(result.t_ns, unit)}, event #{result.event} "
        f"({what}) on {result.branch}"
    )
    strategy = f" by {result.strategy}" if result.strategy and result.strategy not in _FIND_VERBS else ""
    return [line, *(f"  {witness}" for witness in result.witnesses), f"  ({cost}{strategy})"]


def _branch(result: r.BranchResult, unit: str) -> list[str]:
    changes = f" [{'; '.join(result.changes)}]" if result.changes else ""
    return [
        f"{result.name}: from {result.parent} at {format_time(result.at_ns, unit)}{changes} -> {outcome_text(result.outcome, result.failure, unit)}"
    ]


def _branches(result: r.BranchesResult, unit: str) -> list[str]:
    lines = []
    for branch in result.branches:
        marker = "*" if branch.name == result.current else " "
        origin = "" if branch.name == "main" else f" <- {branch.parent} at {format_time(branch.at_ns, unit)}"
        lines.append(f"{marker} {branch.name}{origin}: {outcome_text(branch.outcome, branch.failure, unit)}")
    return lines


def fanout_heading(result: r.FanoutResult, at: str) -> str:
    """``200 futures from 950ms``, or ``20 of 200 futures from 950ms (stopped)``: a rate over the
    futures that ran must say that it is not over the ones asked for."""
    if result.stopped:
        return f"{result.samples} of {result.samples_requested} futures from {at} (stopped)"
    return f"{result.samples} futures from {at}"


def _fanout(result: r.FanoutResult, unit: str) -> list[str]:
    lines = [
        f"{fanout_heading(result, format_time(result.at_ns, unit))}: failure rate {result.failure_rate:.0%}"
    ]
    for signature, count in sorted(result.by_signature.items(), key=lambda i: -i[1]):
        keys = result.keys.get(signature, ())
        shown = ", ".join(str(key) for key in keys[:FANOUT_KEYS_SHOWN]) + (
            ", ..." if len(keys) > FANOUT_KEYS_SHOWN else ""
        )
        lines.append(f"  {count:>5}  {signature}" + (f"  (branch keys {shown})" if keys else ""))
    return lines


def _likelihood(result: r.LikelihoodResult, unit: str) -> list[str]:
    lines = [f"failure likelihood along {result.branch} ({result.samples} futures per snapshot)"]
    for point in result.points:
        bar = "#" * round(point.failure_rate * 20)
        lines.append(f"  {format_time(point.at_ns, unit):>14}  {point.failure_rate:>5.0%}  {bar}")
    if result.point_of_no_return_ns is not None:
        lines.append(f"point of no return: {format_time(result.point_of_no_return_ns, unit)}")
    else:
        lines.append("no point of no return: some future passes from every snapshot")
    return lines


def event_number_text(number: int | None) -> str:
    """An event as every front end names it: ``#N``, the number ``goto #N`` takes (never the
    kernel's ``seq``, which no command accepts)."""
    return "no such event" if number is None else f"#{number}"


def event_refs(event_a: int | None, event_b: int | None) -> str:
    """``a #60168, b #60168``: the diverging event on each side (CLI, shell and TUI alike)."""
    return f"a {event_number_text(event_a)}, b {event_number_text(event_b)}"


def divergence_text(divergence: c.Divergence | None, unit: str) -> str:
    if divergence is None:
        return "no divergence: the effects are identical"
    what = (
        "the end-of-run checks"
        if divergence.kind == "end" and not divergence.node
        else f"{divergence.kind} on {divergence.node}"
    )
    if divergence.event_t_ns is not None:  # t_ns is the scenario's moment (a collective's completion)
        what = f"completed by {what} at {format_time(divergence.event_t_ns, unit)}"
    return (
        f"first divergence at {format_time(divergence.t_ns, unit)}: {what} "
        f"({event_refs(divergence.event_a, divergence.event_b)})"
        f"{': ' + divergence.reason if divergence.reason else ''}"
    )


COMPARE_PATHS_SHOWN = 20


def _compare(result: c.CompareResult, unit: str) -> list[str]:
    lines = [
        f"a {result.a.name}: {failure_text(result.a.failure, unit)}",
        f"b {result.b.name}: {failure_text(result.b.failure, unit)}",
        divergence_text(result.first_divergence, unit),
    ]
    state = result.diff
    if state is not None:
        total = len(state.paths) + state.omitted
        lines.append(
            f"at {format_time(state.at_ns, unit)} ({state.moment}): {total} path{'s' if total != 1 else ''} differ"
            f" (diff {state.a} {state.b} shows the same)"
        )
        lines += [f"  {e.path}: {e.change} {e.summary}" for e in state.paths[:COMPARE_PATHS_SHOWN]]
        if total > COMPARE_PATHS_SHOWN:
            lines.append(f"  ... and {total - COMPARE_PATHS_SHOWN} more")
    for laid in result.reference or ():
        lines += overlay_lines(laid)
    return lines


def _diff(result: c.DiffCommandResult, unit: str) -> list[str]:
    moment = f" ({result.moment})" if result.moment else ""
    lines = [f"diff {result.a} {result.b} at {format_time(result.at_ns, unit)}{moment}"]
    if result.first_divergence is not None:
        lines.append(divergence_text(result.first_divergence, unit))
    lines += [f"  {entry.path}: {entry.change} {entry.summary}" for entry in result.paths]
    if result.omitted:
        lines.append(f"  ... and {result.omitted} more")
    if not result.paths and not result.omitted:
        lines.append("  no differences")
    if result.ops is not None:
        lines += ops_lines(result.ops, unit)
    return lines


def _divergence(result: c.Divergence, unit: str) -> list[str]:
    lines = [divergence_text(result, unit)]
    lines += [f"  {change['path']}: {change['change']} {change['summary']}" for change in result.changes]
    return lines


def _rerun(result: c.RerunResult, unit: str) -> list[str]:
    inputs = "choices from the recording's choice log" if result.choices == "log" else "choices from the seed"
    if result.faults_pinned:
        inputs += f", its {result.faults_pinned} fault records pinned"
    return [
        f"recorded: {failure_text(result.recorded_failure, unit)}",
        f"today:    {failure_text(result.failure, unit)}"
        + (f"  (with {' '.join(result.settings)})" if result.settings else ""),
        f"  ({inputs})",
        divergence_text(result.first_divergence, unit),
    ]


def _minimize(result: MinimizeResult, unit: str) -> list[str]:
    lines = [
        f"minimized {result.signature} in {result.runs} runs ({result.seconds:.1f} s, stopped by {result.stopped_by})",
        f"  faults  {result.faults_before} -> {result.faults_after}: {', '.join(result.faults_kept) or 'none'}",
        f"  choices {result.choices_before} -> {result.choices_after} non-canonical",
    ]
    lines += [f"  {name} {before} -> {after}" for name, (before, after) in result.params_changed.items()]
    lines.append(f"  {failure_text(result.failure, unit)}")
    if result.identity:
        kept = ", ".join(f"{key} {value}" for key, value in result.identity.items())
        lines.append(f"  the same failure: {kept} (as the recording's)")
    on_branch = f" (branch {result.repro_branch})" if result.repro_branch != "main" else ""
    if result.out:
        sizes = (
            f": {result.out_bytes:,} bytes (the input: {result.input_bytes:,})" if result.input_bytes else ""
        )
        lines.append(f"  wrote {result.out}{on_branch}{sizes}")
    lines += [f"  wrote {result.pytest}"] if result.pytest else []
    if result.out:
        lines.append(
            f"  the repro fails after {result.events} events; its test starts at event "
            f"#{result.start_events} ({format_time(result.start_ns, unit)}), before the kept faults: "
            f"{result.start_check}"
        )
    if result.partial:
        lines.append(
            f"  partial ({result.stopped_by}): stopped before a fixpoint; this is the best result so far"
        )
    return lines


def _faults(result: r.FaultsResult, unit: str) -> list[str]:
    lines = []
    for fault in result.faults:
        window = format_time(fault.get("t_start", 0), unit)
        t_end = fault.get("t_end", fault.get("t_start"))
        if t_end is None:
            window += "..never"
        elif t_end != fault.get("t_start"):
            window += f"..{format_time(t_end, unit)}"
        acted = f"  hits {fault['hits']}" if "hits" in fault else ""
        expected = f"  {fault['expected']}" if "expected" in fault else ""
        lines.append(
            f"  {fault.get('id', '?'):<6} {fault.get('kind', '?'):<10} {fault.get('target', '?')!s:<12} {window}"
            f"{expected}{acted}  {fault.get('params', {})}"
        )
    return lines or [f"no faults on {result.branch}"]


def _export(result: r.ExportResult, unit: str) -> list[str]:
    lines = [
        f"wrote {result.trace_events} trace events ({result.bytes_written} bytes) to {result.path}",
        f"  {result.events} events, {result.kernels} kernels, {result.messages} messages, {result.faults} faults",
    ]
    if result.collectives is not None:
        lines.append(
            f"  {result.collectives} collective slices and {result.optimizer_steps} optimizer steps "
            "on a 'collectives' track per rank"
        )
    if result.truncated:
        lines.append(f"  truncated after event #{result.events} (the trace event limit or a stop)")
    return [*lines, "  open it at https://ui.perfetto.dev (Open trace file)"]


def link_head(link: x.ExplainLink, unit: str) -> str:
    """``#60754  983.081931ms  r3  gpu.done``: where a link of a causal chain stands."""
    where = f"#{link.event}" if link.event is not None else link.kind
    when = format_time(link.t_ns, unit) if link.t_ns is not None else ""
    kind = link.kind if link.event is not None else ""
    return " ".join(word for word in (where, when, link.node, kind) if word)


def _explain(result: x.ExplainResult, unit: str) -> list[str]:
    if result.failure is None:
        return [f"{result.branch}: pass: nothing to explain"]
    lines = [f"explain {result.branch}: {failure_text(result.failure, unit)}"]
    for index, link in enumerate(result.links):
        arrow = "  " if index == 0 else "<-"
        lines.append(f"{arrow} {link_head(link, unit)}: {link.what}")
        lines += [f"     {change.path}: {change.summary}" for change in link.changes]
        if link.because:
            lines.append(f"     because it {link.because}")
        if link.otherwise:
            lines.append(f"     ({link.otherwise})")
    if len(result.links) == 1 and result.complete and result.traced_events:  # (0: read from the recording)
        lines.append(
            "  (nothing upstream: no value it read is unlike its peers'; origin PATH follows one value back)"
        )
    if not result.complete:
        lines.append(f"  (stopped on its budget after tracing {result.traced_events} events)")
    if result.site is not None:
        lines += site_lines(result.site)
    return lines


INDICES_SHOWN_MAX = 32
"""Sampler indices a line shows; ``--json`` has them all (up to the recorded limit)."""


def site_lines(site: x.FailureSite) -> list[str]:
    """Where a torch failure stands: rank and step, the batch's sampler indices, the first
    non-finite module (or why it was not probed) — the lines that end ``explain`` on a torch run."""
    lines = [f"at {site.rank}, optimizer step {site.step} ({site.step - 1} completed before it)"]
    if site.indices is None:
        lines.append(f"  sampler indices: none ({site.indices_note})")
    else:
        shown = ", ".join(str(index) for index in site.indices[:INDICES_SHOWN_MAX])
        more = f", ... ({len(site.indices)} in all)" if len(site.indices) > INDICES_SHOWN_MAX else ""
        note = f"; {site.indices_note}" if site.indices_note else ""
        batches = "batch" if site.batches == 1 else f"{site.batches} batches"
        lines.append(f"  sampler indices of its {batches}: [{shown}{more}]{note}")
    if site.module is None:
        lines.append(f"  first non-finite module: {site.probe_note}")
    else:
        lines.append(f"  first non-finite module: {module_text(site.module)}")
    if site.uninitialised is not None:
        lines += uninitialised_lines(site.uninitialised)
    return lines


def module_text(finding: dict[str, Any]) -> str:
    """``0 (Linear), forward output 0: 1 of 256 elements non-finite, first [0, 0] = nan (float32[8, 32]);
    its input 0 was non-finite already``."""
    name = finding.get("module") or "the outermost module"
    where = "forward output" if finding.get("where") == "forward" else "gradient of output"
    shape = [int(size) for size in finding.get("shape", [])]
    position = _unravel(int(finding.get("first_index", 0)), shape)
    text = (
        f"{name} ({finding.get('module_class', '?')}), {where} {finding.get('tensor', 0)}: "
        f"{finding.get('nonfinite')} of {finding.get('elements')} elements non-finite, first "
        f"{position} = {finding.get('value')} ({finding.get('dtype')}{shape})"
    )
    inputs = finding.get("inputs_nonfinite") or []
    if inputs:
        text += f"; its input {', '.join(str(i) for i in inputs)} was non-finite already (it came in with the input: the batch, or code outside the modules)"
    return text


def _unravel(flat: int, shape: list[int]) -> list[int]:
    position = []
    for size in reversed(shape):
        position.append(flat % size if size else 0)
        flat = flat // size if size else 0
    return list(reversed(position))


def _origin(result: x.OriginResult, unit: str) -> list[str]:
    at = format_time(result.at_ns, unit)
    if result.event is None:
        return [f"{result.path} on {result.branch} at {at}: as the world was built (no event wrote it)"]
    lines = [
        f"{result.path} on {result.branch} at {at}: last written by #{result.event} at "
        f"{format_time(result.t_ns, unit)}: {result.kind} -> {result.node}"
    ]
    lines += [f"  {change.path}: {change.change} {change.summary}" for change in result.changes]
    if result.reads:
        lines.append("  from: " + ", ".join(f"{read.path} ({read.value})" for read in result.reads))
    lines.append(
        f"  caused by #{result.caused_by}"
        if result.caused_by is not None
        else "  scheduled when the world was built"
    )
    if result.faults_hit:
        lines.append(f"  faults that acted in it: {', '.join(result.faults_hit)}")
    lines += [f"  log: {line}" for line in result.log]
    return lines


def _help(result: r.HelpResult, unit: str) -> list[str]:
    if result.detail:
        return result.detail.splitlines()
    width = max((len(entry.name) for entry in result.entries), default=0)
    return [f"  {entry.name:<{width}}  {entry.summary}" for entry in result.entries]


_RENDERERS: dict[type, Callable[[Any, str], list[str]]] = {
    r.CursorResult: _cursor,
    r.EventsResult: _events,
    r.PrintResult: _print,
    r.WatchResult: _watch,
    r.FindResult: _find,
    r.BranchResult: _branch,
    r.BranchesResult: _branches,
    r.FanoutResult: _fanout,
    r.LikelihoodResult: _likelihood,
    c.CompareResult: _compare,
    c.DiffCommandResult: _diff,
    c.Divergence: _divergence,
    c.RerunResult: _rerun,
    MinimizeResult: _minimize,
    r.FaultsResult: _faults,
    r.ExportResult: _export,
    r.HelpResult: _help,
    x.ExplainResult: _explain,
    x.OriginResult: _origin,
}


def render_text(result: Any, unit: str = DISPLAY_UNIT_DEFAULT) -> list[str]:
    """The lines that show ``result`` in a terminal, each with the control characters of any text
    from the recording in it escaped (sim/terminal_text.py): one line stays one line."""
    renderer = _RENDERERS.get(type(result))
    if renderer is None:
        raise TypeError(f"no text rendering for {type(result).__name__}")
    return [terminal_safe(line) for line in renderer(result, unit)]
