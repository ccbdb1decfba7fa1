"""The fabric benchmark's two models do the same work (timing is `timetravel bench fabric`, never a test)."""

from __future__ import annotations

from timetravel.bench import SUITES
from timetravel.bench.fabric import ALLTOALL, RING, simpy_messages, timetravel_messages


def test_both_models_deliver_the_same_messages_for_each_pattern() -> None:
    assert timetravel_messages(ALLTOALL, 8, 2)[0] == simpy_messages("alltoall", 8, 2)[0] == 8 * 7 * 2
    assert timetravel_messages(RING, 16, 3)[0] == simpy_messages("ring", 16, 3)[0] == 16 * 3


def test_the_suite_is_registered() -> None:
    assert SUITES["fabric"] == "timetravel.bench.fabric:run_bench"
