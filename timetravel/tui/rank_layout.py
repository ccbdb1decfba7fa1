"""Which ranks the rank grid shows where: outliers first, the rest folded into buckets if need be.

Question the grid answers: *which rank is the odd one out?* Every mode scores each rank by how
far it is from the crowd — its state's severity, the steps it is behind the leader, the distance
of its collective sequence number from the majority's, the time since it last made progress —
and ranks with a score above zero come first, worst first. When all ranks do not fit (1024 ranks
in a 30-column panel), the outliers keep cells of their own (up to half the room) and the rest
are folded, in rank order, into buckets of consecutive ranks, each showing its worst member.
Every rank is always in exactly one cell. Pure functions: the widget only draws the result.
"""

from __future__ import annotations

import math
import re
import statistics
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from timetravel.tui.model import RANK_STATES, RankCell
from timetravel.tui.timefmt import short_time

MODES = ("state", "behind", "seq", "progress")
MODE_TITLES = {
    "state": "state",
    "behind": "steps behind leader",
    "seq": "collective seq vs majority",
    "progress": "time since progress",
}
STATE_GLYPHS = {
    "healthy": "●",
    "slow": "◐",
    "partitioned": "◌",
    "diverged": "≠",
    "crashed": "✖",
    "nan": "!",
}
QUIET_GLYPH = "·"
"""What a rank with nothing to report shows, so that the outliers' numbers stand out."""
VALUE_WIDTHS = {"state": 1, "behind": 3, "seq": 3, "progress": 5}
PROGRESS_OUTLIER_FACTOR = 2
"""A rank is a progress outlier when its time since progress exceeds this many medians."""
_TRAILING_DIGITS = re.compile(r"(\d+)$")


@dataclass(frozen=True)
class GridItem:
    """One cell on screen: a rank, or a bucket of consecutive ranks shown by its worst member."""

    names: tuple[str, ...]
    label: str
    value: str
    state: str
    score: float

    @property
    def is_bucket(self) -> bool:
        return len(self.names) > 1


@dataclass(frozen=True)
class Scored:
    cell: RankCell
    index: int
    score: float
    value: str


def short_labels(names: Sequence[str]) -> dict[str, str]:
    """Rank numbers when every name ends in digits (``rank12`` -> ``12``), else the names."""
    labels = {}
    for name in names:
        match = _TRAILING_DIGITS.search(name)
        if match is None:
            return {name: name[:6] for name in names}
        labels[name] = match.group(1)
    return labels


def majority_seq(cells: Sequence[RankCell]) -> int:
    """The collective sequence number most ranks are at (the smaller one on a tie)."""
    if not cells:
        return 0
    counts = Counter(cell.collective_seq for cell in cells)
    return min(counts, key=lambda seq: (-counts[seq], seq))


def score_cells(cells: Sequence[RankCell], mode: str, now_ns: int) -> list[Scored]:
    """Each rank's distance from the crowd in ``mode`` and the text its cell shows."""
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    leader = max((cell.step for cell in cells), default=0)
    majority = majority_seq(cells)
    since = [max(0, now_ns - cell.last_progress_ns) for cell in cells]
    median = statistics.median(since) if since else 0
    scored = []
    for index, cell in enumerate(cells):
        severity = RANK_STATES.index(cell.state)
        if mode == "state":
            score, value = float(severity), STATE_GLYPHS[cell.state]
        elif mode == "behind":
            behind = leader - cell.step
            score, value = float(behind), (QUIET_GLYPH if behind == 0 else str(min(behind, 999)))
        elif mode == "seq":
            offset = cell.collective_seq - majority
            score, value = float(abs(offset)), (QUIET_GLYPH if offset == 0 else f"{offset:+d}"[:3])
        else:
            score = float(since[index]) if since[index] > PROGRESS_OUTLIER_FACTOR * median else 0.0
            value = short_time(since[index], digits=2)
        scored.append(Scored(cell, index, score, value))
    return scored


def _item(scored: Scored, labels: dict[str, str]) -> GridItem:
    cell = scored.cell
    return GridItem((cell.name,), labels[cell.name], scored.value, cell.state, scored.score)


def _bucket(members: Sequence[Scored], labels: dict[str, str]) -> GridItem:
    worst = max(members, key=lambda item: (item.score, RANK_STATES.index(item.cell.state), -item.index))
    label = labels[members[0].cell.name]
    names = tuple(item.cell.name for item in members)
    return GridItem(names, label, worst.value, worst.cell.state, worst.score)


def layout(cells: Sequence[RankCell], mode: str, now_ns: int, capacity: int) -> list[GridItem]:
    """The cells to draw, in order, at most ``capacity`` of them, covering every rank once."""
    scored = score_cells(cells, mode, now_ns)
    labels = short_labels([cell.name for cell in cells])

    def severity_key(item: Scored) -> tuple[float, int, int]:
        return (-item.score, -RANK_STATES.index(item.cell.state), item.index)

    outliers = sorted((item for item in scored if item.score > 0), key=severity_key)
    normal = [item for item in scored if item.score <= 0]
    if len(scored) <= capacity or capacity < 2:
        return [_item(item, labels) for item in [*outliers, *normal]]
    alone = outliers[: capacity // 2]
    rest = sorted([*outliers[capacity // 2 :], *normal], key=lambda item: item.index)
    buckets = capacity - len(alone)
    size = math.ceil(len(rest) / buckets)
    items = [_item(item, labels) for item in alone]
    items += [_bucket(rest[start : start + size], labels) for start in range(0, len(rest), size)]
    return items


def summary(cells: Sequence[RankCell], mode: str, now_ns: int) -> str:
    """One line about the whole cluster in ``mode``."""
    if not cells:
        return "no ranks"
    if mode == "state":
        counts = Counter(cell.state for cell in cells)
        parts = [f"{counts[state]} {state}" for state in reversed(RANK_STATES) if counts[state]]
        return f"{len(cells)} ranks: " + ", ".join(parts)
    if mode == "behind":
        leader = max(cell.step for cell in cells)
        behind = [leader - cell.step for cell in cells if cell.step < leader]
        tail = f", {len(behind)} behind (max {max(behind)})" if behind else ", none behind"
        return f"leader at step {leader}{tail}"
    if mode == "seq":
        majority = majority_seq(cells)
        elsewhere = sum(1 for cell in cells if cell.collective_seq != majority)
        return f"collective #{majority} on {len(cells) - elsewhere}, {elsewhere} elsewhere"
    oldest = max(cells, key=lambda cell: now_ns - cell.last_progress_ns)
    return f"oldest progress {short_time(max(0, now_ns - oldest.last_progress_ns))} ago ({oldest.name})"


def detail(cell: RankCell, cells: Sequence[RankCell], now_ns: int) -> str:
    """Everything the grid knows about one rank, on one line; what it waits on comes first."""
    leader = max((item.step for item in cells), default=cell.step)
    behind = leader - cell.step
    words = [f"{cell.name} {cell.state}"]
    if cell.waiting_on:
        words.append(f"waiting on {cell.waiting_on}")
    words += [
        f"step {cell.step}" + (f" ({behind} behind)" if behind else ""),
        f"coll #{cell.collective_seq}",
        f"progress {short_time(max(0, now_ns - cell.last_progress_ns))} ago",
    ]
    return " · ".join(words)
