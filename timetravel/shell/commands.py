"""The shell's own commands, beside the shared language: ``plot``, ``quit``, and ``help`` over both.

Every command that acts on a recording is the language's (``timetravel.explore.commands``) and
runs through its handlers, exactly as in the TUI. The shell adds only what belongs to a terminal:
``plot`` (a metric of chosen branches, drawn in braille — the TUI draws the same curves in its
plot widget) and ``quit``. Their specs are the language's own spec classes, parsed by the language's
one parser, so completion, ``help`` and error messages treat them like every other command.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from timetravel.explore.commands import ArgumentSpec, CommandError, CommandSpec, Invocation, OptionSpec
from timetravel.explore.commands.parse import parse_words
from timetravel.explore.results import HelpEntry, HelpResult
from timetravel.shell.render.plot import PLOT_HEIGHT_MAX, PLOT_WIDTH_MAX, SERIES_MAX, Series
from timetravel.shell.results import PlotResult

PLOT_METRIC_DEFAULT = "loss"
PLOT_WIDTH_DEFAULT = 60
PLOT_HEIGHT_DEFAULT = 12

PLOT_SPEC = CommandSpec(
    "plot",
    "a metric of chosen branches as a terminal plot (default: the loss of every branch)",
    (
        ArgumentSpec(
            "branches",
            "branch",
            f"the branches to plot, at most {SERIES_MAX} (default: all)",
            required=False,
            rest=True,
            each=True,
        ),
    ),
    (
        OptionSpec("--metric", "word", f"the metric to plot (default {PLOT_METRIC_DEFAULT})"),
        OptionSpec("--log", None, "a logarithmic value axis (a loss spans decades)"),
        OptionSpec("--width", "count", f"plot width in characters (default {PLOT_WIDTH_DEFAULT})"),
        OptionSpec("--height", "count", f"plot height in characters (default {PLOT_HEIGHT_DEFAULT})"),
    ),
    examples=("plot", "plot main b1", "plot main b1 --metric loss --log --width 80"),
)
QUIT_SPEC = CommandSpec("quit", "leave the shell (Ctrl-D does too)", aliases=("exit",), examples=("quit",))
SHELL_SPECS: tuple[CommandSpec, ...] = (PLOT_SPEC, QUIT_SPEC)
SHELL_OPTION_KINDS: dict[tuple[str, str], str] = {(PLOT_SPEC.name, "--metric"): "metric"}
"""What completion offers for the shell's options beyond the spec's kind: metric names for ``--metric``."""
SHELL_COMMANDS: dict[str, CommandSpec] = {spec.name: spec for spec in SHELL_SPECS}
SHELL_ALIASES: dict[str, str] = {alias: spec.name for spec in SHELL_SPECS for alias in spec.aliases}


def shell_spec(name: str) -> CommandSpec | None:
    return SHELL_COMMANDS.get(SHELL_ALIASES.get(name, name))


def parse_shell_command(words: Sequence[str], display_unit: str) -> Invocation:
    """One of the shell's own commands, by the language's one parser (:func:`parse_words`)."""
    spec = shell_spec(words[0])
    assert spec is not None, words[0]
    return parse_words(words, display_unit, spec=spec)


def with_shell_commands(language_help: HelpResult) -> HelpResult:
    """The language's command list followed by the shell's own commands."""
    entries = tuple(HelpEntry(spec.name, spec.usage, spec.summary) for spec in SHELL_SPECS)
    return HelpResult(language_help.entries + entries, language_help.detail)


def shell_help(spec: CommandSpec) -> HelpResult:
    return HelpResult((HelpEntry(spec.name, spec.usage, spec.summary),), spec.help_detail)


# -- plot ----------------------------------------------------------------------------------------

MetricRows = Sequence[Sequence[Any]]
"""A world's metric series: ``[[t_ns, node, value], ...]`` in time order."""


def metric_curve(rows: MetricRows) -> list[tuple[int, float]]:
    """One point per time: the mean over the nodes that recorded the metric then.

    A NaN or infinity at any node makes that time's point non-finite: the mean must not hide
    the one rank whose loss went NaN.
    """
    curve: list[tuple[int, float]] = []
    current: int | None = None
    values: list[float] = []
    for row in rows:
        t_ns, value = int(row[0]), float(row[-1])
        if current is not None and t_ns != current:
            curve.append((current, _mean_keeping_nonfinite(values)))
            values = []
        current = t_ns
        values.append(value)
    if current is not None:
        curve.append((current, _mean_keeping_nonfinite(values)))
    return curve


def _mean_keeping_nonfinite(values: list[float]) -> float:
    bad = [value for value in values if not math.isfinite(value)]
    return bad[0] if bad else math.fsum(values) / len(values)


def plot_result(
    invocation: Invocation,
    branch_names: Sequence[str],
    metric_rows: Callable[[str, str], MetricRows | None],
    known_metrics: Sequence[str] = (),
) -> PlotResult:
    """The curves ``plot`` asked for. ``metric_rows(branch, metric)`` reads one branch's series;
    ``known_metrics`` (the cursor's branch's) are named when a branch lacks the metric asked for."""
    wanted: list[str] = list(invocation.value("branches") or branch_names)
    if len(wanted) > SERIES_MAX:
        raise CommandError(f"plot: at most {SERIES_MAX} branches in one plot (got {len(wanted)})")
    unknown = [name for name in wanted if name not in branch_names]
    if unknown:
        raise CommandError(f"plot: no branch {unknown[0]!r} (branches: {', '.join(branch_names)})")
    metric = invocation.value("metric", PLOT_METRIC_DEFAULT)
    width = invocation.value("width", PLOT_WIDTH_DEFAULT)
    height = invocation.value("height", PLOT_HEIGHT_DEFAULT)
    if not (1 <= width <= PLOT_WIDTH_MAX and 1 <= height <= PLOT_HEIGHT_MAX):
        raise CommandError(
            f"plot: size {width}x{height} out of range (1..{PLOT_WIDTH_MAX} x 1..{PLOT_HEIGHT_MAX})"
        )
    series = []
    for name in wanted:
        rows = metric_rows(name, metric)
        if rows is None:
            known = (
                f" (metrics: {', '.join(known_metrics)}; choose one with --metric)" if known_metrics else ""
            )
            raise CommandError(f"plot: branch {name} has no metric {metric!r}{known}")
        series.append(Series(name, metric_curve(rows)))
    return PlotResult(metric, tuple(series), bool(invocation.value("log", False)), width, height)
