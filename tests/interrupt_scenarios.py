"""A needle whose rounds take real time: long enough to interrupt a minimization in the middle.

The leader sleeps ``ROUND_SLEEP_S`` of wall time at every round (the guard is off for this scenario:
the sleep is the point), so a run takes about half a second and a minimization a minute; the
results are needle's, bit for bit.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any

from timetravel.scenarios import needle
from timetravel.sim import Context, Event

ROUND_SLEEP_S = 0.012


def slow_round(state: dict[str, Any], event: Event, ctx: Context) -> None:
    time.sleep(ROUND_SLEEP_S)
    needle.leader_round(state, event, ctx)


_handlers = {role: dict(table) for role, table in needle.SCENARIO.handlers.items()}
_handlers["leader"]["round"] = slow_round
SLOW_NEEDLE = dataclasses.replace(needle.SCENARIO, name="slow_needle", handlers=_handlers, determinism="off")
