"""Short time text for narrow cells: ``950ms``, ``1.25s``, ``12us`` — at most a few significant digits.

The kernel's ``format_time`` is exact (every digit of the nanoseconds); a cell of five columns
needs an approximate figure instead. Exact times stay available in labels and the command line.
"""

from __future__ import annotations

from timetravel.sim.timefmt import NS_PER_UNIT, format_time

_UNITS_BY_SIZE = ("s", "ms", "us", "ns")


def short_time(t_ns: int, digits: int = 3) -> str:
    """``t_ns`` in the largest unit that keeps it >= 1, rounded to ``digits`` significant digits."""
    if t_ns == 0:
        return "0"
    sign = "-" if t_ns < 0 else ""
    value = abs(t_ns)
    for unit in _UNITS_BY_SIZE:
        scale = NS_PER_UNIT[unit]
        if value >= scale or unit == "ns":
            amount = value / scale
            decimals = max(0, digits - len(str(int(amount))))
            text = f"{amount:.{decimals}f}".rstrip("0").rstrip(".") if decimals else f"{amount:.0f}"
            return f"{sign}{text}{unit}"
    return f"{sign}{value}ns"  # pragma: no cover - the loop always returns


def exact_time(t_ns: int, unit: str) -> str:
    """The exact time in the display unit (the kernel's formatting)."""
    return format_time(t_ns, unit)


def fixed_time(t_ns: int, unit: str) -> str:
    """The exact time with every decimal down to the nanosecond, so a column of times aligns."""
    scale = NS_PER_UNIT[unit]
    whole, remainder = divmod(abs(t_ns), scale)
    sign = "-" if t_ns < 0 else ""
    digits = len(str(scale)) - 1
    return f"{sign}{whole}.{remainder:0{digits}d}" if digits else f"{sign}{whole}"
