"""The lines ``diff A B --ops`` adds: the first torch ops whose outputs differ (explore/op_diff.py).

Shared by the CLI, the shell's batch mode and the TUI's diff screen."""

from __future__ import annotations

from typing import Any

from timetravel.sim.timefmt import format_time

OPS_SHOWN_MAX = 16


def ops_lines(found: Any, unit: str) -> list[str]:
    """``first differing ops of step 3 ...`` then one line per op (an OpsDiff)."""
    if not found.step:
        return [f"ops: {found.note}"]
    lines = [
        f"first differing ops, optimizer step {found.step} re-executed on both branches (from #{found.start_a} "
        f"and #{found.start_b}; {found.compared} ops matched by rank, module, op and occurrence, "
        f"{found.differing} differ):"
    ]
    if not found.ops:
        lines.append("  none: every op of the step computed the same bits on both branches")
    for op in found.ops[:OPS_SHOWN_MAX]:
        lines.append(f"  {op_text(op, unit)}")
    if len(found.ops) > OPS_SHOWN_MAX:
        lines.append(f"  ... and {found.differing - OPS_SHOWN_MAX} more (--json lists {len(found.ops)})")
    if found.note:
        lines.append(f"  ({found.note})")
    return lines


def op_text(op: Any, unit: str) -> str:
    """``r1 step 3 at 1.197178ms  0 (backward)  aten::mm #2  float32[32, 16]: 12/512 elements differ,
    max abs 4.9e-05, max 419430 ulp``."""
    module = op.module or "(no module)"
    outputs = ", ".join(f"{dtype}{list(shape)}" for shape, dtype in zip(op.shapes, op.dtypes, strict=False))
    head = f"{op.rank} step {op.step} at {format_time(op.t_ns, unit)}  {module}  {op.op} #{op.occurrence}  {outputs or '-'}"
    if op.note:
        return f"{head}: {op.note}"
    if op.differing is None:
        return f"{head}: differs"
    figures = [f"{op.differing}/{op.elements} elements differ"]
    if op.max_abs_diff is not None:
        figures.append(f"max abs {op.max_abs_diff:.3g}")
    if op.max_ulp is not None:
        figures.append(f"max {op.max_ulp} ulp")
    return f"{head}: {', '.join(figures)}"
