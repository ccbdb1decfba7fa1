"""The fork checkpoints a torch Session keeps, as data: what one holds, the set every Session of the
process shares, and the memory budget that bounds them (world_source.py takes and thins them).

Coordinator side; the processes themselves are checkpoints.py's.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from timetravel.sim.world import World
from timetravel.torch.world import checkpoints

CHECKPOINT_BYTES_BUDGET_MAX = 8 * 1024**3
CHECKPOINT_BYTES_BUDGET_MIN = 512 * 1024**2
"""Memory all live checkpoints may hold (their processes' private memory and the World copies kept
beside them): a quarter of the memory available when the first torch Session opens, within these
bounds (TIMETRAVEL_CHECKPOINT_BYTES sets it). 2 GiB kept 11 of a 1.2M-parameter run's 41 snapshot
points (40 MiB a rank) and seeks re-executed 270 events on average."""
CHECKPOINTS_MAX_CEILING = 64
CHECKPOINTS_MIN = 2
BOUND_MEASURE_EVERY = 8
"""Re-derive ``checkpoints_max`` from measured memory every this many checkpoints taken."""
BOUND_SAMPLE_SETS = 3


@dataclass
class KeptCheckpoint:
    events: int
    t_ns: int
    state_hash: str
    rank_key: str
    ranks: checkpoints.RankCheckpoints
    directory: Any
    """The ranks' working directory (torch/workdir.py): its path is the resumed processes' cwd."""
    files: Any
    """Its files at this moment (a FilesManifest): restored before the ranks resume, so a branch
    sees the files as they were at its fork point and a script resuming from latest.pt never reads
    its own future."""
    world: World | None = None
    """A copy of the World at this moment when it is one of the recording's snapshots (same event
    and state hash): a seek restores from it instead of decoding the snapshot (world_copy.py)."""
    world_bytes: int = 0


@dataclass
class SharedCheckpoints:
    """The checkpoints every torch Session of this process shares, and what they refer to."""

    kept: list[KeptCheckpoint]
    checkpoints_max: int | None = None
    """Derived from the budget and measured memory (None until measured: CHECKPOINTS_MAX_CEILING)."""
    taken: int = 0
    users: int = 0
    directories: list[Any] = field(default_factory=list)
    """Working directories checkpoints refer to: closed with the last torch Session."""
    values_wanted: int = 0
    """Actions in progress that read tensors' values (``TorchWorlds.with_values``)."""
    keeper: checkpoints.CheckpointKeeper | None = None
    """The control end of every checkpoint process (started with the first checkpoint)."""

    def checkpoints(self) -> checkpoints.CheckpointKeeper:
        if self.keeper is None:
            self.keeper = checkpoints.CheckpointKeeper()
        return self.keeper

    def close(self) -> None:
        """The last torch Session closed: every checkpoint and working directory goes."""
        if self.keeper is not None:
            for kept in self.kept:
                self.keeper.discard(kept.ranks)
            self.keeper.close()
            self.keeper = None
        self.kept.clear()
        for directory in self.directories:
            directory.close()
        self.directories.clear()

    # -- the bounded set -----------------------------------------------------------------------------

    def measure_bound(self) -> None:
        """``checkpoints_max`` from the budget and what a set holds *now*: right after the fork a
        checkpoint owns almost nothing; its private pages grow as the live rank writes (44 MiB a
        rank for a small model once it has trained on). The mean of the oldest sets is the measure."""
        oldest = sorted(self.kept, key=lambda kept: kept.events)[:BOUND_SAMPLE_SETS]
        sizes = [
            sum(checkpoints.uss_bytes(c.pid) for c in kept.ranks.ranks.values()) + kept.world_bytes
            for kept in oldest
        ]
        per_set = max(sum(sizes) // max(len(sizes), 1), 1)
        self.checkpoints_max = max(CHECKPOINTS_MIN, min(CHECKPOINTS_MAX_CEILING, budget_bytes() // per_set))

    def thin(self) -> None:
        """Drop checkpoints until the bound holds: keep the newest, and space the rest
        exponentially towards the past (drop the one whose loss leaves the smallest gap for its age)."""
        bound = self.checkpoints_max or CHECKPOINTS_MAX_CEILING
        while len(self.kept) > bound:
            ordered = sorted(self.kept, key=lambda kept: kept.events)
            newest = ordered[-1].events
            best, best_cost = None, None
            for index in range(len(ordered) - 1):
                before = ordered[index - 1].events if index else 0
                after = ordered[index + 1].events
                age = max(newest - ordered[index].events, 1)
                cost = (after - before) / age
                if best_cost is None or cost < best_cost:
                    best, best_cost = ordered[index], cost
            assert best is not None
            self.forget(best)

    def forget(self, kept: KeptCheckpoint) -> None:
        """End ``kept``'s processes and drop it from the set."""
        self.checkpoints().discard(kept.ranks)
        if kept in self.kept:
            self.kept.remove(kept)

    def find(self, events: int, state_hash: str) -> KeptCheckpoint | None:
        """The live checkpoint of the world after event #``events`` with that state hash, if kept."""
        for kept in self.kept:
            if kept.events == events and kept.state_hash == state_hash:
                return self._alive(kept)
        return None

    def find_key(self, key: str) -> KeptCheckpoint | None:
        """The live checkpoint of the ranks ``key`` names (``specs.rank_key``), if kept."""
        for kept in self.kept:
            if kept.rank_key == key:
                return self._alive(kept)
        return None

    def _alive(self, kept: KeptCheckpoint) -> KeptCheckpoint | None:
        if kept.ranks.alive():
            return kept
        self.forget(kept)  # killed by the user or the OOM killer: rebuilt by re-execution instead
        return None


SHARED = SharedCheckpoints([])
"""The checkpoints of this process's torch Sessions: a cache found by content (the rank key), shared
by every Session of the process (a compare's tracks resume the cursor's), closed with the last one."""


def budget_bytes() -> int:
    text = os.environ.get("TIMETRAVEL_CHECKPOINT_BYTES", "")
    if text.isdigit() and int(text) > 0:
        return int(text)
    return min(CHECKPOINT_BYTES_BUDGET_MAX, max(CHECKPOINT_BYTES_BUDGET_MIN, _available_bytes() // 4))


def _available_bytes() -> int:
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return CHECKPOINT_BYTES_BUDGET_MIN * 4
