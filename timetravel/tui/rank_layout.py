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
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

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
    "hung": "⊘",
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


def short_labels(names: Sequence[str]) -> dict[str, str]:
    """Rank numbers when every name ends in digits (``rank12`` -> ``12``), else the names."""
    labels = {}
    for name in names:
        match = _TRAILING_DIGITS.search(name)
        if match is None:
            return {name: name[:6] for name in names}
        labels[name] = match.group(1)
    return labels


class RankColumns:
    """The ranks as numpy columns, built once per set of cells, so that scoring 10,000 ranks for
    every cursor move and mode is a few vector operations rather than a Python loop."""

    def __init__(self, cells: Sequence[RankCell]) -> None:
        self.cells = tuple(cells)
        self.names = [cell.name for cell in self.cells]
        self.labels = short_labels(self.names)
        self.step = np.fromiter((cell.step for cell in self.cells), np.int64, len(self.cells))
        self.seq = np.fromiter((cell.collective_seq for cell in self.cells), np.int64, len(self.cells))
        self.progress = np.fromiter((cell.last_progress_ns for cell in self.cells), np.int64, len(self.cells))
        self.severity = np.fromiter(
            (RANK_STATES.index(cell.state) for cell in self.cells), np.int64, len(self.cells)
        )

    def __len__(self) -> int:
        return len(self.cells)

    @property
    def leader(self) -> int:
        return int(self.step.max()) if len(self) else 0

    @property
    def majority_seq(self) -> int:
        """The collective sequence number most ranks are at (the smaller one on a tie)."""
        if not len(self):
            return 0
        values, counts = np.unique(self.seq, return_counts=True)
        return int(values[np.argmax(counts)])

    def since(self, now_ns: int) -> np.ndarray:
        return np.maximum(0, now_ns - self.progress)

    def scores(self, mode: str, now_ns: int) -> np.ndarray:
        """Each rank's distance from the crowd in ``mode`` (0 for a rank like the others)."""
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        if mode == "state":
            return self.severity.astype(np.float64)
        if mode == "behind":
            return (self.leader - self.step).astype(np.float64)
        if mode == "seq":
            return np.abs(self.seq - self.majority_seq).astype(np.float64)
        since = self.since(now_ns).astype(np.float64)
        median = float(np.median(since)) if len(self) else 0.0
        return np.where(since > PROGRESS_OUTLIER_FACTOR * median, since, 0.0)

    def value(self, index: int, mode: str, now_ns: int) -> str:
        """The text rank ``index``'s cell shows in ``mode``."""
        if mode == "state":
            return STATE_GLYPHS[self.cells[index].state]
        if mode == "behind":
            behind = self.leader - int(self.step[index])
            return QUIET_GLYPH if behind == 0 else str(min(behind, 999))
        if mode == "seq":
            offset = int(self.seq[index]) - self.majority_seq
            return QUIET_GLYPH if offset == 0 else f"{offset:+d}"[:3]
        return short_time(int(self.since(now_ns)[index]), digits=2)


def majority_seq(cells: Sequence[RankCell]) -> int:
    """The collective sequence number most ranks are at (the smaller one on a tie)."""
    return RankColumns(cells).majority_seq


def layout(ranks: RankColumns, mode: str, now_ns: int, capacity: int) -> list[GridItem]:
    """The cells to draw, in order, at most ``capacity`` of them, covering every rank once."""
    count = len(ranks)
    scores = ranks.scores(mode, now_ns)
    index = np.arange(count)
    outlying = np.flatnonzero(scores > 0)
    order = np.lexsort((outlying, -ranks.severity[outlying], -scores[outlying]))
    outliers = outlying[order]

    def item(position: int) -> GridItem:
        cell = ranks.cells[position]
        return GridItem(
            (cell.name,),
            ranks.labels[cell.name],
            ranks.value(position, mode, now_ns),
            cell.state,
            float(scores[position]),
        )

    if count <= capacity or capacity < 2:
        normal = index[scores <= 0]
        return [item(int(position)) for position in (*outliers, *normal)]
    alone = outliers[: capacity // 2]
    rest = np.sort(np.concatenate([outliers[capacity // 2 :], index[scores <= 0]]))
    size = math.ceil(len(rest) / (capacity - len(alone)))
    rank_key = scores * len(RANK_STATES) + ranks.severity
    items = [item(int(position)) for position in alone]
    for start in range(0, len(rest), size):
        members = rest[start : start + size]
        worst = int(members[int(np.argmax(rank_key[members]))])
        names = tuple(ranks.names[int(position)] for position in members)
        items.append(
            GridItem(
                names,
                ranks.labels[names[0]],
                ranks.value(worst, mode, now_ns),
                ranks.cells[worst].state,
                float(scores[worst]),
            )
        )
    return items


def summary(ranks: RankColumns, mode: str, now_ns: int) -> str:
    """One line about the whole cluster in ``mode``."""
    if not len(ranks):
        return "no ranks"
    if mode == "state":
        counts = np.bincount(ranks.severity, minlength=len(RANK_STATES))
        parts = [
            f"{counts[level]} {state}"
            for level, state in reversed(list(enumerate(RANK_STATES)))
            if counts[level]
        ]
        return f"{len(ranks)} ranks: " + ", ".join(parts)
    if mode == "behind":
        behind = ranks.leader - ranks.step
        lagging = int(np.count_nonzero(behind))
        tail = f", {lagging} behind (max {int(behind.max())})" if lagging else ", none behind"
        return f"leader at step {ranks.leader}{tail}"
    if mode == "seq":
        majority = ranks.majority_seq
        elsewhere = int(np.count_nonzero(ranks.seq != majority))
        return f"collective #{majority} on {len(ranks) - elsewhere}, {elsewhere} elsewhere"
    since = ranks.since(now_ns)
    oldest = int(np.argmax(since))
    return f"oldest progress {short_time(int(since[oldest]))} ago ({ranks.names[oldest]})"


def detail(cell: RankCell, leader: int, now_ns: int) -> str:
    """Everything the grid knows about one rank, on one line; what it waits on comes first."""
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
