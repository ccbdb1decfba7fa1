from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timetravel.sim import TimeFormatError, format_time, parse_time


@pytest.mark.parametrize(
    ("text", "expected_ns"),
    [
        ("950", 950_000_000),
        ("950ms", 950_000_000),
        ("1.5s", 1_500_000_000),
        ("120us", 120_000),
        ("120µs", 120_000),
        ("80ns", 80),
        (" 2 ms ", 2_000_000),
        ("0.000001ms", 1),
        (".5s", 500_000_000),
    ],
)
def test_parse_time_reads_every_documented_form(text: str, expected_ns: int) -> None:
    assert parse_time(text) == expected_ns


def test_bare_number_uses_the_display_unit() -> None:
    assert parse_time("950", unit="us") == 950_000
    assert parse_time(3, unit="s") == 3_000_000_000


@pytest.mark.parametrize("text", ["", "ms", "1.5.2s", "12 parsecs", "0.5ns", "1e3ms", "x" * 100, "--1"])
def test_parse_time_rejects_garbage_with_a_message_naming_it(text: str) -> None:
    with pytest.raises(TimeFormatError) as error:
        parse_time(text)
    assert "\n" not in str(error.value)


def test_format_time_is_exact() -> None:
    assert format_time(950_000_000) == "950ms"
    assert format_time(1_500_000) == "1.5ms"
    assert format_time(1) == "0.000001ms"
    assert format_time(1_500_000_000, "s") == "1.5s"
    assert format_time(-2_000_000) == "-2ms"


@given(st.integers(min_value=-(10**15), max_value=10**15), st.sampled_from(["ns", "us", "ms", "s"]))
def test_format_then_parse_round_trips(t_ns: int, unit: str) -> None:
    assert parse_time(format_time(t_ns, unit), unit) == t_ns


def test_format_time_auto_picks_the_largest_whole_unit_and_stays_exact() -> None:
    from timetravel.sim import format_time_auto

    assert format_time_auto(461_689) == "461.689us"
    assert format_time_auto(2_268_030) == "2.26803ms"
    assert format_time_auto(1_500_000_000) == "1.5s"
    assert format_time_auto(80) == "80ns"
    for t_ns in (1, 999, 1_000, 123_456_789, 10**12 + 1):
        assert parse_time(format_time_auto(t_ns)) == t_ns
