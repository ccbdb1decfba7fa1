"""The rank-side detectors, run after every update, and the rank's reports to the monitor.

* ``nan``: the rank's weights are non-finite after the update, or its own forward loss is;
* ``blowup``: the rank's own forward loss is above ``blowup_loss``.

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

from timetravel.scenarios.dp_training.replicas import all_finite
from timetravel.sim import Context

MONITOR = "monitor"
OBSERVE = "observe"
NAN_SITE = "dp_training.nan"
BLOWUP_SITE = "dp_training.blowup"


def weights_digest(weights: np.ndarray) -> int:
    """64-bit xxh3 of the weights' bytes: equal digests mean bit-identical weights."""
    return xxhash.xxh3_64_intdigest(np.ascontiguousarray(weights).view(np.uint8).data)


def check_step(state: dict[str, Any], ctx: Context, step: int) -> bool:
    """Run the rank-side detectors after ``step``; False when one failed (the run stops).

    They look at what this rank computed itself, the weights after the update and the loss of
    its own forward pass, never at the all-reduced bucket: a bit flipped in transit that the
    guard skipped is not a failure, weights that went bad are.
    """
    config = ctx.world.config
    loss = state["loss_local"]
    weights_finite = all_finite(state["weights"])
    if not weights_finite or not math.isfinite(loss):
        what = "weights after" if not weights_finite else "loss of its forward pass in"
        ctx.fail(
            "nan", f"{ctx.node}: non-finite {what} step {step} (the guard let it through)", site=NAN_SITE
        )
        return False
    if loss > config["blowup_loss"]:
        ctx.fail(
            "blowup",
            f"{ctx.node}: loss {loss:.6g} of step {step} is above blowup_loss {config['blowup_loss']:g}",
            site=BLOWUP_SITE,
        )
        return False
    if config["oracle"] or step % config["check_every"] == 0 or step == config["steps"]:
        report = [state["index"], state["generation"], step, weights_digest(state["weights"])]
        ctx.deliver(ctx.now, MONITOR, OBSERVE, report)
    return True
