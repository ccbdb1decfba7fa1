"""Clock virtualization inside a rank: every clock the script reads is the rank's logical clock."""

from __future__ import annotations

import datetime
import logging
import sys
import threading
import time
from collections.abc import Iterator
from datetime import datetime as imported_datetime

import pytest

from timetravel.torch.rank.env.clock import WALL_EPOCH_NS, ClockError, RankClock
from timetravel.torch.rank.env.virtual_time import install_time, real_monotonic_ns

EPOCH_SECONDS = WALL_EPOCH_NS // 1_000_000_000


@pytest.fixture
def clock() -> Iterator[RankClock]:
    clock = RankClock()
    with install_time(clock):
        yield clock


def test_clocks_read_logical_time_from_the_documented_epochs(clock: RankClock) -> None:
    assert time.monotonic_ns() == 0
    assert time.perf_counter() == 0.0
    assert time.time_ns() == WALL_EPOCH_NS
    clock.advance(1_500_000_000)
    assert time.perf_counter_ns() == 1_500_000_000
    assert time.monotonic() == 1.5
    assert time.process_time_ns() == 1_500_000_000
    assert time.time() == EPOCH_SECONDS + 1.5
    assert time.clock_gettime_ns(time.CLOCK_REALTIME) == WALL_EPOCH_NS + 1_500_000_000
    assert time.clock_gettime(time.CLOCK_MONOTONIC) == 1.5
    assert time.gmtime()[:6] == (2000, 1, 1, 0, 0, 1)
    assert time.strftime("%Y-%m-%d %H:%M:%S") == "2000-01-01 00:00:01"


def test_a_step_timed_around_charged_compute_is_positive(clock: RankClock) -> None:
    start = time.perf_counter()
    clock.advance(2_000_000)
    assert time.perf_counter() - start == pytest.approx(0.002)


def test_sleep_advances_logical_time_without_waiting(clock: RankClock) -> None:
    real_start = real_monotonic_ns()
    time.sleep(30)
    time.sleep(0.25)
    assert clock.now_ns() == 30_250_000_000
    assert real_monotonic_ns() - real_start < 5_000_000_000
    with pytest.raises(ValueError, match="non-negative"):
        time.sleep(-1)
    with pytest.raises(TypeError):
        time.sleep("1")  # type: ignore[arg-type]


def test_datetime_now_utcnow_today_read_the_logical_wall_clock(clock: RankClock) -> None:
    clock.advance(3_723_000_001_000)  # 1 h 2 min 3 s and 1 µs
    expected = datetime.datetime(2000, 1, 1, 1, 2, 3, 1)
    assert datetime.datetime.now() == expected
    assert imported_datetime.now() == expected  # imported before installing: the C type itself is patched
    assert datetime.datetime.utcnow() == expected
    assert datetime.datetime.now(datetime.UTC) == expected.replace(tzinfo=datetime.UTC)
    assert datetime.date.today() == datetime.date(2000, 1, 1)
    assert datetime.datetime.today() == expected

    class Stamp(datetime.datetime):
        pass

    assert type(Stamp.now()) is Stamp


def test_logging_timestamps_are_logical(clock: RankClock) -> None:
    record = logging.LogRecord("rank", logging.INFO, __file__, 1, "hello", None, None)
    assert record.created == EPOCH_SECONDS
    assert logging.Formatter("%(asctime)s").format(record).startswith("2000-01-01 00:00:00")


def test_names_bound_before_install_are_rebound_and_restored() -> None:
    import timeit

    before = timeit.default_timer
    clock = RankClock(start_ns=7)
    with install_time(clock):
        assert timeit.default_timer() == 7e-9
    assert timeit.default_timer is before
    assert time.time() > EPOCH_SECONDS + 10 * 365 * 86400


def test_real_blocking_timeouts_still_expire() -> None:
    """threading's timeouts wait on the host clock: a logical deadline that never moves would hang."""
    with install_time(RankClock()):
        condition = threading.Condition()
        with condition:
            assert condition.wait_for(lambda: False, timeout=0.05) is False


def test_a_queue_imported_after_install_still_times_out() -> None:
    """queue binds ``from time import monotonic`` at import: a late import gets the real clock back."""
    imported_before = sys.modules.pop("queue", None)
    try:
        with install_time(RankClock()):
            import queue as late_queue

            assert late_queue is not imported_before
            with pytest.raises(late_queue.Empty):
                late_queue.Queue().get(timeout=0.05)
            assert time.monotonic() == 0.0
    finally:
        if imported_before is None:
            sys.modules.pop("queue", None)
        else:
            sys.modules["queue"] = imported_before


def test_the_clock_only_moves_forwards_in_integer_ns() -> None:
    clock = RankClock(start_ns=10)
    clock.set(20)
    assert clock.now_ns() == 20
    with pytest.raises(ClockError, match="cannot go back"):
        clock.set(19)
    with pytest.raises(ClockError, match="integer"):
        clock.advance(1.5)  # type: ignore[arg-type]
    with pytest.raises(ClockError, match=">= 0"):
        clock.advance(-1)


def test_the_test_runner_keeps_the_host_clock() -> None:
    """pytest times a test that runs a rank in-process on the host clock (its durations stay true)."""
    import _pytest.timing

    before = _pytest.timing.perf_counter
    with install_time(RankClock()):
        assert _pytest.timing.perf_counter is before
