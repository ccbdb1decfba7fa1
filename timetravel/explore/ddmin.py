"""Zeller's delta debugging (ddmin): a 1-minimal sublist for which a test holds. The minimizer's
``faults`` pass runs it over a fault schedule (explore/minimize.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TypeVar

T = TypeVar("T")


def _split(items: list[T], parts: int) -> Iterator[list[T]]:
    size, extra = divmod(len(items), parts)
    start = 0
    for part in range(parts):
        end = start + size + (1 if part < extra else 0)
        yield items[start:end]
        start = end


def ddmin(items: list[T], test: Callable[[list[T]], bool]) -> list[T]:
    """Zeller's ddmin: a 1-minimal sublist of ``items`` for which ``test`` holds (it holds for all).

    Try each chunk alone, then each complement, at a granularity that doubles when neither
    helps; the order of ``items`` is kept in every sublist tried.
    """
    granularity = 2
    while len(items) >= 2:
        chunks = list(_split(items, granularity))
        reduced = next((chunk for chunk in chunks if chunk and test(chunk)), None)
        if reduced is not None:
            items, granularity = reduced, 2
            continue
        complement = None
        if granularity > 2:
            for skip in range(len(chunks)):
                candidate = [item for index, chunk in enumerate(chunks) if index != skip for item in chunk]
                if test(candidate):
                    complement = candidate
                    break
        if complement is not None:
            items, granularity = complement, max(granularity - 1, 2)
            continue
        if granularity >= len(items):
            break
        granularity = min(len(items), granularity * 2)
    return items


__all__ = ["ddmin"]
