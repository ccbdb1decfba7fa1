"""A real run's logged losses beside a recording's branches: ``compare --reference FILE``.

The question it answers is "does the simulator train like my real job did?": the user exports the
losses their real run logged (``step,loss`` CSV, with or without a header, or JSON lines
``{"step": N, "loss": X}``) and every branch's curve of one metric on one node is laid over them,
step by step, marking the first step whose relative difference exceeds ``rtol``.

Matching is by order, not by time: the k-th value the branch logged on that node is the
simulation's value for the reference's k-th step (the simulator's clock is not the real run's
step counter, and a metric is logged once per step). Only the first ``min(len)`` steps are
compared; the lengths are reported.

The file is untrusted input: its size is checked on the open descriptor before anything is read
(:data:`REFERENCE_BYTES_MAX`), the number of rows is bounded (:data:`REFERENCE_ROWS_MAX`), and a
non-numeric or non-finite value, or a step that repeats or goes back, is refused with one line
naming the file and the line (an :class:`ExploreError`, which every front end shows as bad input).
This module imports nothing heavy (no torch, no numpy).
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from timetravel.explore.session import Session
from timetravel.explore.tracks import track_on
from timetravel.explore.work import ExploreError
from timetravel.recording.files import open_regular

REFERENCE_BYTES_MAX = 16 * 1024 * 1024
"""A reference file larger than this is refused before it is read (a million rows fit easily)."""
REFERENCE_ROWS_MAX = 1_000_000
RTOL_DEFAULT = 1e-3
METRIC_DEFAULT = "loss"
NODE_DEFAULT = "r0"
STEP_MAX = 2**63 - 1
REFERENCE_ROWS_AROUND = 2
"""Rows shown before and after the first step outside rtol (the JSON carries every row)."""


@dataclass(frozen=True)
class ReferenceRow:
    step: int
    reference: float
    simulated: float
    relative_difference: float
    """``|simulated - reference| / |reference|`` (inf when the reference is 0 and they differ)."""

    def to_data(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "reference": self.reference,
            "simulated": self.simulated,
            "relative_difference": _finite_or_text(self.relative_difference),
        }


@dataclass(frozen=True)
class ReferenceOverlay:
    """One branch's curve over the reference: every compared row and the first step outside rtol."""

    branch: str
    metric: str
    node: str
    rtol: float
    rows: tuple[ReferenceRow, ...]
    reference_steps: int
    simulated_steps: int
    first_outside: int | None
    """The index in ``rows`` of the first step with ``|sim - ref| > rtol * |ref|``; None when all agree."""
    missing: str | None = None
    """Why the branch has no curve to compare (no such metric, or none on that node); None otherwise."""

    @property
    def compared(self) -> int:
        return len(self.rows)

    @property
    def first_outside_row(self) -> ReferenceRow | None:
        return None if self.first_outside is None else self.rows[self.first_outside]

    def to_data(self) -> dict[str, Any]:
        row = self.first_outside_row
        return {
            "branch": self.branch,
            "metric": self.metric,
            "node": self.node,
            "rtol": self.rtol,
            "reference_steps": self.reference_steps,
            "simulated_steps": self.simulated_steps,
            "compared": self.compared,
            "first_outside": None if row is None else row.to_data(),
            "missing": self.missing,
            "rows": [entry.to_data() for entry in self.rows],
        }


def load_reference(path: str | Path) -> list[tuple[int, float]]:
    """``[(step, loss), ...]`` from a CSV or JSON-lines file (see the module docstring)."""
    name = str(path)
    with open_regular(path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if size > REFERENCE_BYTES_MAX:
            raise ExploreError(
                f"{name}: {size} bytes, more than the {REFERENCE_BYTES_MAX} a reference may have"
            )
        data = handle.read(REFERENCE_BYTES_MAX + 1)
    if len(data) > REFERENCE_BYTES_MAX:
        raise ExploreError(f"{name}: more than the {REFERENCE_BYTES_MAX} bytes a reference may have")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ExploreError(f"{name}: not UTF-8 text (byte {error.start})") from None
    lines = text.splitlines()
    first = next((line.strip() for line in lines if line.strip()), "")
    if not first:
        raise ExploreError(f"{name}: no steps (an empty file)")
    rows = _json_lines(name, lines) if first.startswith("{") else _csv_rows(name, lines)
    if not rows:
        raise ExploreError(f"{name}: no steps (only a header)")
    return rows


def _json_lines(name: str, lines: list[str]) -> list[tuple[int, float]]:
    rows: list[tuple[int, float]] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line, parse_constant=_refuse_constant)
        except (ValueError, RecursionError) as error:
            raise ExploreError(f"{name}:{number}: not a JSON object ({_short(error)})") from None
        if not isinstance(entry, dict) or "step" not in entry or "loss" not in entry:
            raise ExploreError(f'{name}:{number}: expected {{"step": N, "loss": X}}')
        _append(rows, name, number, _step(name, number, entry["step"]), _loss(name, number, entry["loss"]))
    return rows


def _csv_rows(name: str, lines: list[str]) -> list[tuple[int, float]]:
    rows: list[tuple[int, float]] = []
    step_column, loss_column = 0, 1
    header_seen = False
    for number, fields in enumerate(csv.reader(lines), start=1):
        cells = [cell.strip() for cell in fields]
        if not any(cells):
            continue
        if not header_seen:
            header_seen = True
            lowered = [cell.lower() for cell in cells]
            if "step" in lowered or "loss" in lowered:
                if "step" not in lowered or "loss" not in lowered:
                    raise ExploreError(f"{name}:{number}: a header needs both a 'step' and a 'loss' column")
                step_column, loss_column = lowered.index("step"), lowered.index("loss")
                continue
            if len(cells) != 2:
                raise ExploreError(
                    f"{name}:{number}: without a header a reference has two columns step,loss "
                    f"(got {len(cells)})"
                )
        if len(cells) <= max(step_column, loss_column):
            raise ExploreError(f"{name}:{number}: {len(cells)} columns, expected a step and a loss")
        step = _step(name, number, _number_text(name, number, cells[step_column], "step"))
        loss = _loss(name, number, _number_text(name, number, cells[loss_column], "loss"))
        _append(rows, name, number, step, loss)
    return rows


def _number_text(name: str, number: int, cell: str, what: str) -> float | int:
    try:
        return int(cell)
    except ValueError:
        pass
    try:
        return float(cell)
    except ValueError:
        raise ExploreError(f"{name}:{number}: {what} {cell[:40]!r} is not a number") from None


def _step(name: str, number: int, value: Any) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= STEP_MAX:
        raise ExploreError(f"{name}:{number}: step {str(value)[:40]} is not an integer in 0..{STEP_MAX}")
    return value


def _loss(name: str, number: int, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ExploreError(f"{name}:{number}: loss {str(value)[:40]!r} is not a number")
    loss = float(value)
    if not math.isfinite(loss):
        raise ExploreError(f"{name}:{number}: loss {value!r} is not finite")
    return loss


def _append(rows: list[tuple[int, float]], name: str, number: int, step: int, loss: float) -> None:
    if rows and step <= rows[-1][0]:
        word = "repeats" if step == rows[-1][0] else "goes back from"
        raise ExploreError(f"{name}:{number}: step {step} {word} step {rows[-1][0]} (steps must increase)")
    if len(rows) >= REFERENCE_ROWS_MAX:
        raise ExploreError(f"{name}:{number}: more than {REFERENCE_ROWS_MAX} steps")
    rows.append((step, loss))


def _refuse_constant(text: str) -> Any:
    raise ValueError(f"{text} is not a number JSON allows")


def _short(error: BaseException) -> str:
    return str(error).split("\n", 1)[0][:80]


def _finite_or_text(value: float) -> float | str:
    return value if math.isfinite(value) else str(value)


def node_values(series: list[list[Any]], node: str) -> list[float]:
    """The numeric values a metric series logged on ``node``, in the order they were logged."""
    return [
        float(entry[2])
        for entry in series
        if len(entry) == 3
        and entry[1] == node
        and isinstance(entry[2], (int, float))
        and not isinstance(entry[2], bool)
    ]


def relative_difference(simulated: float, reference: float) -> float:
    difference = abs(simulated - reference)
    if difference == 0.0:
        return 0.0
    if reference == 0.0 or not math.isfinite(difference):
        return math.inf
    return difference / abs(reference)


def overlay(
    branch: str,
    simulated: list[float],
    reference: list[tuple[int, float]],
    *,
    rtol: float = RTOL_DEFAULT,
    metric: str = METRIC_DEFAULT,
    node: str = NODE_DEFAULT,
) -> ReferenceOverlay:
    """``simulated[k]`` against ``reference[k]`` for every k both have; the first step outside rtol.

    A step is outside when ``|sim - ref| > rtol * |ref|``; a non-finite simulated value (a NaN
    loss) is always outside.
    """
    rows: list[ReferenceRow] = []
    first_outside: int | None = None
    for index, ((step, expected), value) in enumerate(zip(reference, simulated, strict=False)):
        rows.append(ReferenceRow(step, expected, value, relative_difference(value, expected)))
        outside = not math.isfinite(value) or abs(value - expected) > rtol * abs(expected)
        if outside and first_outside is None:
            first_outside = index
    return ReferenceOverlay(
        branch, metric, node, rtol, tuple(rows), len(reference), len(simulated), first_outside
    )


def overlay_branch(
    session: Session,
    branch: str,
    reference: list[tuple[int, float]],
    *,
    rtol: float = RTOL_DEFAULT,
    metric: str = METRIC_DEFAULT,
    node: str = NODE_DEFAULT,
) -> ReferenceOverlay:
    """:func:`overlay` of branch ``branch``'s ``metric`` on ``node`` (read from its last snapshot, no
    re-execution); a branch without that metric, or without it on ``node``, says so in ``missing``."""
    with track_on(session, branch) as track:
        names = track.metric_names()
        series = track.metric_series(metric) if metric in names else []
    if metric not in names:
        missing = f"no metric {metric!r} on {branch} (metrics: {', '.join(names[:12]) or 'none'})"
        return ReferenceOverlay(branch, metric, node, rtol, (), len(reference), 0, None, missing)
    values = node_values(series, node)
    if not values:
        missing = f"metric {metric!r} has no values on node {node!r} in {branch}"
        return ReferenceOverlay(branch, metric, node, rtol, (), len(reference), 0, None, missing)
    return overlay(branch, values, reference, rtol=rtol, metric=metric, node=node)


def overlay_lines(laid: ReferenceOverlay) -> list[str]:
    """A few rows around the first step outside rtol (the first rows when none is) and the verdict:
    the text every front end prints for ``compare --reference`` (the CLI, the shell, the TUI)."""
    title = f"reference vs {laid.branch} ({laid.metric} on {laid.node}, rtol {laid.rtol:g})"
    if laid.missing is not None:
        return [f"{title}: {laid.missing}"]
    lines = [
        f"{title}: {laid.compared} steps compared "
        f"(reference {laid.reference_steps}, simulated {laid.simulated_steps})",
        "        step      reference      simulated   rel. diff",
    ]
    centre = 0 if laid.first_outside is None else laid.first_outside
    start = max(centre - REFERENCE_ROWS_AROUND, 0)
    for index in range(start, min(centre + REFERENCE_ROWS_AROUND + 1, laid.compared)):
        row = laid.rows[index]
        mark = "  <- first outside" if index == laid.first_outside else ""
        lines.append(
            f"  {row.step:>10} {row.reference:>14.8g} {row.simulated:>14.8g} "
            f"{row.relative_difference:>11.3g}{mark}"
        )
    first = laid.first_outside_row
    if first is None:
        lines.append("  every compared step within rtol")
    else:
        lines.append(
            f"  first step outside rtol: {first.step} (ref {first.reference:.8g}, sim {first.simulated:.8g})"
        )
    return lines
