"""A re-execution that keeps fork checkpoints of its ranks at the recording's snapshot points it
passes (coordinator side; world_source.py makes one for every re-execution that runs ranks).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timetravel.sim.kernel import STOP_MAX_EVENTS, RunResult, Simulation
from timetravel.sim.world import World


class CheckpointingSimulation(Simulation):
    """A Simulation that keeps rank checkpoints at the recording's snapshot points it passes and
    where it stops. Runs that pause (steppers, recorders) keep their own rhythm and no checkpoints."""

    def __init__(
        self,
        snapshot_points: Callable[[], list[int]],
        keep: Callable[[World], None],
        *args: Any,
        **options: Any,
    ) -> None:
        super().__init__(*args, **options)
        self.snapshot_points = snapshot_points
        """The recording's snapshot points (events), in order: where a checkpoint is kept."""
        self.keep = keep
        """Keeps a checkpoint of the world's ranks (``TorchWorlds.keep``)."""

    def run(
        self,
        until_ns: int | None = None,
        max_events: int | None = None,
        *,
        pause_every_events: int | None = None,
        pause_every_ns: int | None = None,
        on_pause: Any = None,
    ) -> RunResult:
        if pause_every_events or pause_every_ns or on_pause is not None:
            return super().run(
                until_ns,
                max_events,
                pause_every_events=pause_every_events,
                pause_every_ns=pause_every_ns,
                on_pause=on_pause,
            )
        world = self.world
        limit = None if max_events is None else world.events_processed + max_events
        boundaries = self.snapshot_points()
        while True:
            following = [b for b in boundaries if b > world.events_processed and (limit is None or b < limit)]
            segment_end = following[0] if following else limit
            budget = None if segment_end is None else segment_end - world.events_processed
            result = super().run(until_ns, budget)
            at_boundary = result.stop == STOP_MAX_EVENTS and world.events_processed == segment_end
            if at_boundary and following:
                self.keep(world)
                continue
            return result
