"""``--against-real``'s comparison: per rank, real torchrun's losses and state beside the simulator's.

Plain data in, plain data out (no torch): each side is its ranks' capture records
(protocol/capture.py) and output lines. Per rank three things are compared, each with a verdict:

* ``losses`` — the loss of each optimizer step (what the rank called ``backward()`` on since the
  previous step), step by step;
* ``printed_losses`` — the numbers the rank printed or logged after the word ``loss`` (``loss 0.74``,
  ``train_loss=0.74``, ``'loss': 0.74``), in order;
* ``state`` — after every optimizer step and at the script's end, each tensor of the modules the
  optimizer trains (parameters and buffers, a DTensor's local shard) by name: digests, then values.

A verdict is ``identical`` (same bits), ``summation_order`` (different only as far as another order
of summation moves floats: the largest relative difference, max|a−b| / max|a| of a tensor, is within
:data:`SUMMATION_ORDER_RTOL` of its dtype, and it is named), ``differs`` (the first step and tensor
beyond it are named) or ``none`` (nothing of that kind on either side). The run's verdict is the worst
of its ranks', and ``differs`` when one side passed and the other failed.
"""

from __future__ import annotations

import math
import re
from typing import Any

import numpy as np

from timetravel.torch.protocol.arrays import DTYPES, TensorFormatError

SUMMATION_ORDER_RTOL = {
    "float64": 1e-10,
    "float32": 1e-4,
    "float16": 1e-2,
    "bfloat16": 5e-2,
    "complex64": 1e-4,
    "complex128": 1e-10,
}
"""The largest relative difference, per dtype, that another order of summation explains. Adding the
same numbers in another order moves a float32 result by a few ulps (1.2e-7 each); a few training
steps carry that into the weights, amplified, without reaching 1e-4. Integers must be equal."""
LOSS_RTOL = SUMMATION_ORDER_RTOL["float32"]
"""Losses are read as Python floats, mostly from float32 tensors."""
VERDICTS = ("none", "identical", "summation_order", "differs")
"""From best to worst: a run's verdict is the worst of its parts."""
PRINTED_LOSSES_MAX = 100_000
"""Printed losses read per rank (in order)."""
LOSS_PATTERN = re.compile(
    r"(?<![A-Za-z])loss(?![A-Za-z])[^0-9+\-.\n]{0,12}"
    r"([-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|[-+]?nan|[-+]?inf)",
    re.IGNORECASE,
)


def worst(verdicts: list[str]) -> str:
    return max(verdicts, key=VERDICTS.index, default="none")


def relative_difference(real: float, simulated: float) -> float:
    if real == simulated or (math.isnan(real) and math.isnan(simulated)):
        return 0.0
    if not (math.isfinite(real) and math.isfinite(simulated)):
        return math.inf
    scale = max(abs(real), abs(simulated))
    return abs(real - simulated) / scale


def printed_losses(lines: list[str]) -> list[str]:
    """The numbers after ``loss`` in a rank's output, as printed (text)."""
    found: list[str] = []
    for line in lines:
        found += LOSS_PATTERN.findall(line)
        if len(found) >= PRINTED_LOSSES_MAX:
            return found[:PRINTED_LOSSES_MAX]
    return found


def compare_values(real: list[Any], simulated: list[Any], label: str) -> dict[str, Any]:
    """Two series of numbers (floats, or printed text): the verdict, the largest relative difference
    and the first entry beyond the loss tolerance (or the first that differs at all)."""
    result: dict[str, Any] = {"count": {"real": len(real), "simulator": len(simulated)}}
    if not real and not simulated:
        return {**result, "verdict": "none", "max_rel_diff": 0.0, "first_difference": None}
    largest, first_any, first_beyond = 0.0, None, None
    for index, (a, b) in enumerate(zip(real, simulated, strict=False)):
        if a == b:
            continue
        difference = relative_difference(_number(a), _number(b))
        entry = {label: index + 1, "real": a, "simulator": b, "rel_diff": difference}
        first_any = first_any or entry
        if difference > LOSS_RTOL and first_beyond is None:
            first_beyond = entry
        largest = max(largest, difference)
    verdict = "identical" if first_any is None else "summation_order"
    if first_beyond is not None or len(real) != len(simulated):
        verdict = "differs"
    first = first_beyond or first_any
    if first is None and len(real) != len(simulated):
        first = {label: min(len(real), len(simulated)) + 1, "missing": True}
    return {**result, "verdict": verdict, "max_rel_diff": largest, "first_difference": first}


def _number(value: Any) -> float:
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def tensor_difference(real: dict[str, Any], simulated: dict[str, Any]) -> tuple[float, str | None]:
    """The relative difference of one tensor on both sides (0.0 for equal digests) and why it cannot
    be within summation order, if it cannot (another shape or dtype, integers, values not kept)."""
    if real["dtype"] != simulated["dtype"] or real["shape"] != simulated["shape"]:
        return math.inf, (
            f"real {real['dtype']}{real['shape']}, simulator {simulated['dtype']}{simulated['shape']}"
        )
    if real["digest"] == simulated["digest"]:
        return 0.0, None
    if real["data"] is None or simulated["data"] is None:
        return math.inf, "its values were not kept (over the capture limit): only the digests differ"
    a, b = _array(real), _array(simulated)
    if a.dtype.kind in "iub":
        return math.inf, "an integer or bool tensor: its values must be equal"
    with np.errstate(invalid="ignore", over="ignore"):
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if not np.array_equal(nan_a, nan_b):
            return math.inf, "NaN on one side only"
        a, b = np.where(nan_a, 0.0, a), np.where(nan_b, 0.0, b)
        scale = float(max(np.max(np.abs(a), initial=0.0), np.max(np.abs(b), initial=0.0)))
        largest = float(np.max(np.abs(a - b), initial=0.0))
    if not math.isfinite(largest):
        return math.inf, "infinite on one side only"
    return (largest / scale if scale else 0.0), None


def _array(tensor: dict[str, Any]) -> np.ndarray:
    dtype = DTYPES.get(tensor["dtype"])
    if dtype is None:
        raise TensorFormatError(f"a captured tensor of dtype {tensor['dtype']!r}")
    data = tensor["data"]
    if not isinstance(data, bytes) or len(data) != math.prod(tensor["shape"]) * dtype.itemsize:
        raise TensorFormatError(f"captured tensor {tensor['name']!r} has {len(data)} bytes for its shape")
    array = np.frombuffer(data, dtype=dtype)
    if array.dtype.kind in "iub":
        return array
    return array.astype(np.complex128 if array.dtype.kind == "c" else np.float64)


def compare_tensors(
    real: list[dict[str, Any]], simulated: list[dict[str, Any]]
) -> tuple[str, float, dict[str, Any] | None]:
    """One moment's state on both sides: verdict, largest relative difference, first tensor beyond."""
    by_name = {tensor["name"]: tensor for tensor in simulated}
    real_names = [tensor["name"] for tensor in real]
    missing = [name for name in by_name if name not in set(real_names)]
    extra = [name for name in real_names if name not in by_name]
    if missing or extra:
        name = (extra or missing)[0]
        side = "real" if extra else "simulator"
        return "differs", math.inf, {"tensor": name, "why": f"only the {side} side has it"}
    verdict, largest, first = "identical", 0.0, None
    for tensor in real:
        difference, why = tensor_difference(tensor, by_name[tensor["name"]])
        if difference == 0.0:
            continue
        rtol = SUMMATION_ORDER_RTOL.get(tensor["dtype"], 0.0)
        if why is not None or difference > rtol:
            verdict = "differs"
            first = first or {"tensor": tensor["name"], "rel_diff": difference, "why": why}
        elif verdict == "identical":
            verdict = "summation_order"
        largest = max(largest, difference)
    return verdict, largest, first


def compare_states(real: list[dict[str, Any]], simulated: list[dict[str, Any]]) -> dict[str, Any]:
    """Every step's state and the end's (capture records of one rank on each side)."""
    real_steps = [record for record in real if record["kind"] == "step"]
    simulated_steps = [record for record in simulated if record["kind"] == "step"]
    moments = [(f"step {a['step']}", a, b) for a, b in zip(real_steps, simulated_steps, strict=False)]
    real_end, simulated_end = _end(real), _end(simulated)
    if real_end and simulated_end:
        moments.append(("end", real_end, simulated_end))
    result: dict[str, Any] = {
        "steps": {"real": len(real_steps), "simulator": len(simulated_steps)},
        "tensors": len(moments[-1][1]["tensors"]) if moments else 0,
        "final": moments[-1][0] if moments else None,
    }
    if not moments:
        return {**result, "verdict": "none", "max_rel_diff": 0.0, "first_difference": None}
    verdicts, largest, first = [], 0.0, None
    for moment, a, b in moments:
        verdict, difference, where = compare_tensors(a["tensors"], b["tensors"])
        verdicts.append(verdict)
        largest = max(largest, difference)
        if where is not None and first is None:
            first = {"at": moment, **where}
    verdict = worst(verdicts)
    if len(real_steps) != len(simulated_steps):
        verdict = "differs"
        first = first or {"at": f"step {min(len(real_steps), len(simulated_steps)) + 1}", "why": "missing"}
    return {**result, "verdict": verdict, "max_rel_diff": largest, "first_difference": first}


def _end(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    ends = [record for record in records if record["kind"] == "end" and record["tensors"]]
    return ends[-1] if ends else None


def compare_rank(rank: int, real: dict[str, Any], simulated: dict[str, Any]) -> dict[str, Any]:
    """One rank: ``real``/``simulated`` are ``{"records": [...], "lines": [...]}``."""
    real_losses, simulated_losses = (
        [record["loss"] for record in side["records"] if record["kind"] == "step"]
        for side in (real, simulated)
    )
    if all(loss is None for loss in real_losses + simulated_losses):
        real_losses, simulated_losses = [], []  # no step followed a backward on either side
    parts = {
        "losses": compare_values(real_losses, simulated_losses, label="step"),
        "printed_losses": compare_values(
            printed_losses(real["lines"]), printed_losses(simulated["lines"]), label="number"
        ),
        "state": compare_states(real["records"], simulated["records"]),
    }
    verdict = worst([part["verdict"] for part in parts.values()])
    return {"rank": rank, "verdict": verdict, **parts}
