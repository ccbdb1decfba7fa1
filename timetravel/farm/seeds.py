"""Which seeds a sweep runs: ``--seeds A:B`` ranges and ``--shard I/N`` slices of them.

A seed set is a list of disjoint half-open ranges, kept as ranges so that ``0:100000000`` costs
nothing until it is iterated. A shard ``I/N`` owns the seeds ``s`` with ``s % N == I``. Tying the
shard to the seed value (not to its position in the list) means a shard owns the same seeds when
the range grows, so an array job that is re-submitted with a wider ``--seeds`` resumes instead of
reshuffling work between shards.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

SEED_MAX = (1 << 63) - 1
"""Seeds are stored in SQLite INTEGER columns (signed 64-bit)."""
RANGES_MAX = 1_000
"""Bound on the comma-separated parts of one ``--seeds`` value."""
SHARDS_MAX = 1_000_000


class SeedSpecError(ValueError):
    """A ``--seeds`` or ``--shard`` value that does not parse; the message shows the expected form."""


@dataclass(frozen=True)
class Shard:
    """Shard ``index`` of ``count`` (0-based): the seeds ``s`` with ``s % count == index``."""

    index: int = 0
    count: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.count <= SHARDS_MAX or not 0 <= self.index < self.count:
            raise SeedSpecError(f"shard {self.index}/{self.count}: need 0 <= I < N <= {SHARDS_MAX}")

    def owns(self, seed: int) -> bool:
        return seed % self.count == self.index

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


@dataclass(frozen=True)
class SeedSet:
    """Sorted, disjoint, non-empty half-open ranges of seeds."""

    ranges: tuple[range, ...]

    def __iter__(self) -> Iterator[int]:
        for part in self.ranges:
            yield from part

    def __len__(self) -> int:
        return sum(len(part) for part in self.ranges)

    def __contains__(self, seed: object) -> bool:
        return any(seed in part for part in self.ranges)

    def count_in(self, shard: Shard) -> int:
        """How many seeds of this set the shard owns (without iterating them)."""
        return sum(_count_congruent(part.start, part.stop, shard) for part in self.ranges)

    def in_shard(self, shard: Shard) -> Iterator[int]:
        for part in self.ranges:
            first = part.start + (shard.index - part.start) % shard.count
            yield from range(first, part.stop, shard.count)

    def __str__(self) -> str:
        return ",".join(
            str(part.start) if len(part) == 1 else f"{part.start}:{part.stop}" for part in self.ranges
        )


def _count_congruent(start: int, stop: int, shard: Shard) -> int:
    first = start + (shard.index - start) % shard.count
    return max(0, (stop - first + shard.count - 1) // shard.count)


def parse_seeds(text: str) -> SeedSet:
    """``A:B`` (A included, B excluded), ``N``, or a comma-separated list of those."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not parts:
        raise SeedSpecError(f"--seeds expects A:B (e.g. 0:1000), got {text!r}")
    if len(parts) > RANGES_MAX:
        raise SeedSpecError(f"--seeds has {len(parts)} parts; at most {RANGES_MAX}")
    ranges = sorted((_parse_part(part) for part in parts), key=lambda part: part.start)
    merged: list[range] = []
    for part in ranges:
        if merged and part.start <= merged[-1].stop:
            merged[-1] = range(merged[-1].start, max(merged[-1].stop, part.stop))
        else:
            merged.append(part)
    return SeedSet(tuple(merged))


def _parse_part(part: str) -> range:
    start_text, colon, stop_text = part.partition(":")
    try:
        start = int(start_text)
        stop = int(stop_text) if colon else start + 1
    except ValueError:
        raise SeedSpecError(f"--seeds expects A:B (e.g. 0:1000) or N, got {part!r}") from None
    if not 0 <= start < stop <= SEED_MAX + 1:
        raise SeedSpecError(f"--seeds {part}: need 0 <= A < B <= {SEED_MAX + 1}")
    return range(start, stop)


def parse_shard(text: str) -> Shard:
    """``I/N``: shard I (0-based) of N, e.g. ``$SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT``."""
    index_text, slash, count_text = text.partition("/")
    try:
        if not slash:
            raise ValueError
        return Shard(int(index_text), int(count_text))
    except ValueError:
        raise SeedSpecError(f"--shard expects I/N with 0 <= I < N (e.g. 0/4), got {text!r}") from None
