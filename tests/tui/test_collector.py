"""IdleCollector: the full garbage collection waits for the App to be idle, and the thresholds
come back when the App stops."""

from __future__ import annotations

import gc

from timetravel.tui.collector import FULL_COLLECTION_DEFERRED, IdleCollector


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_full_collection_runs_only_after_idle_time_and_only_once_per_activity() -> None:
    clock = Clock()
    saved = gc.get_threshold()
    collector = IdleCollector(idle_s=2.0, clock=clock)
    collector.start()
    try:
        assert gc.get_threshold() == (saved[0], saved[1], FULL_COLLECTION_DEFERRED)
        assert collector.tick(busy=False) is None, "nothing happened since it started"
        collector.activity()
        clock.now += 1.9
        assert collector.tick(busy=False) is None, "not idle long enough"
        clock.now += 0.2
        assert collector.tick(busy=True) is None, "a job is running"
        duration = collector.tick(busy=False)
        assert duration is not None and collector.collections == [duration]
        clock.now += 10
        assert collector.tick(busy=False) is None, "no activity since the last collection"
    finally:
        collector.stop()
    assert gc.get_threshold() == saved and gc.get_freeze_count() == 0
