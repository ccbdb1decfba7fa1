"""The rank-side detectors, run after every update, and the rank's reports to the monitor.

* ``nan``: the weights are non-finite after the guard, or a non-finite loss was applied;
* ``blowup``: the global loss of an applied step is above ``blowup_loss``.

The replica checks need every rank's view, so a rank *reports* its weight digest to the monitor
(:mod:`monitor`) on check steps, and on every step when ``oracle=on``. A report is an out-of-band
event delivered at the same instant: the monitor is the test harness, not part of the simulated
job, so reporting costs no network time and changes no timing.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import xxhash

from timetravel.scenarios.dp_training.numerics import all_finite
from timetravel.scenarios.dp_training.update import Verdict
from timetravel.sim import Context

MONITOR = "monitor"
OBSERVE = "observe"
NAN_SITE = "dp_training.nan"
BLOWUP_SITE = "dp_training.blowup"


def weights_digest(weights: np.ndarray) -> int:
    """64-bit xxh3 of the weights' bytes: equal digests mean bit-identical weights."""
    return xxhash.xxh3_64_intdigest(np.ascontiguousarray(weights).view(np.uint8).data)


def check_step(state: dict[str, Any], ctx: Context, step: int, verdict: Verdict) -> bool:
    """Run the rank-side detectors after ``step``; False when one failed (the run stops)."""
    config = ctx.world.config
    applied = state["last_applied"]
    if not all_finite(state["weights"]) or (applied and not math.isfinite(verdict.loss)):
        what = "weights" if not all_finite(state["weights"]) else "loss"
        ctx.fail(
            "nan",
            f"{ctx.node}: non-finite {what} after step {step} (the guard let it through)",
            site=NAN_SITE,
        )
        return False
    if applied and verdict.loss > config["blowup_loss"]:
        ctx.fail(
            "blowup",
            f"{ctx.node}: loss {verdict.loss:.6g} after step {step} is above blowup_loss {config['blowup_loss']:g}",
            site=BLOWUP_SITE,
        )
        return False
    if config["oracle"] or step % config["check_every"] == 0 or step == config["steps"]:
        report = [state["index"], state["generation"], step, weights_digest(state["weights"])]
        ctx.deliver(ctx.now, MONITOR, OBSERVE, report)
    return True
