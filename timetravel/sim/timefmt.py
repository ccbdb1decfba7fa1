"""Logical time: integer nanoseconds, and the one place that parses and formats it.

Time inside the simulation is always an ``int`` number of nanoseconds (DESIGN.md, principle 4).
Front ends speak in a display unit (milliseconds unless a recording says otherwise), so a bare
number typed by a user is read in that unit: ``950`` means 950 ms, while ``950ms``, ``1.5s``,
``120us`` and ``80ns`` carry their own unit.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

NS_PER_UNIT: dict[str, int] = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
DISPLAY_UNIT_DEFAULT = "ms"
TIME_TEXT_LENGTH_MAX = 64

_TIME_PATTERN = re.compile(r"^\s*([+-]?(?:\d+(?:\.\d*)?|\.\d+))\s*(ns|us|µs|ms|s)?\s*$")


class TimeFormatError(ValueError):
    """A time string that cannot be read; the message names the text and the accepted forms."""


def parse_time(text: str | int, unit: str = DISPLAY_UNIT_DEFAULT) -> int:
    """Read ``text`` as a time and return integer nanoseconds.

    A bare number is in ``unit``. Fractions are exact (decimal arithmetic) and must land on a
    whole nanosecond, so ``1.5s`` is 1_500_000_000 and ``0.5ns`` is an error rather than a
    silently rounded time.
    """
    if unit not in NS_PER_UNIT:
        raise TimeFormatError(f"unknown time unit {unit!r} (use one of {', '.join(NS_PER_UNIT)})")
    if isinstance(text, bool):
        raise TimeFormatError(f"not a time: {text!r}")
    if isinstance(text, int):
        return text * NS_PER_UNIT[unit]
    if len(text) > TIME_TEXT_LENGTH_MAX:
        raise TimeFormatError(f"time text longer than {TIME_TEXT_LENGTH_MAX} characters")
    match = _TIME_PATTERN.match(text)
    if match is None:
        raise TimeFormatError(f"not a time: {text!r} (examples: 950, 950ms, 1.5s, 120us, 80ns)")
    number_text, unit_text = match.groups()
    scale = NS_PER_UNIT["us" if unit_text == "µs" else (unit_text or unit)]
    try:
        value = Decimal(number_text) * scale
    except InvalidOperation as error:  # pragma: no cover - the pattern admits only decimals
        raise TimeFormatError(f"not a time: {text!r}") from error
    if value != value.to_integral_value():
        raise TimeFormatError(f"time {text!r} is not a whole number of nanoseconds")
    return int(value)


def format_time(t_ns: int, unit: str = DISPLAY_UNIT_DEFAULT) -> str:
    """Format integer nanoseconds in ``unit`` with just the digits needed to be exact."""
    if unit not in NS_PER_UNIT:
        raise TimeFormatError(f"unknown time unit {unit!r}")
    scale = NS_PER_UNIT[unit]
    whole, remainder = divmod(abs(t_ns), scale)
    sign = "-" if t_ns < 0 else ""
    if remainder == 0:
        return f"{sign}{whole}{unit}"
    digits = len(str(scale)) - 1
    fraction = str(remainder).rjust(digits, "0").rstrip("0")
    return f"{sign}{whole}.{fraction}{unit}"


def format_time_auto(t_ns: int) -> str:
    """Format exactly, in the largest unit in which the value is at least 1 (``461.689us``)."""
    magnitude = abs(t_ns)
    for unit in ("s", "ms", "us"):
        if magnitude >= NS_PER_UNIT[unit]:
            return format_time(t_ns, unit)
    return format_time(t_ns, "ns")
