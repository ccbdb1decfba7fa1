"""How much memory a rank may take: the ``rank_memory_max`` setting, resolved on this machine.

A script written for a cluster of GPUs can allocate more than one host holds; run as N ranks on one
machine it would swap the host to a halt or wake the kernel's OOM killer. Each rank therefore runs
under ``RLIMIT_DATA`` (its heap and anonymous mappings — torch's own start-up memory, about 0.3 GiB,
included): an allocation past it fails in the rank (``MemoryError``, torch's ``DefaultCPUAllocator:
can't allocate memory``), and the run fails ``oom`` naming the rank (rank/errors.py).

The setting: ``auto`` (the default: MACHINE_MEMORY_SHARE of the machine's memory, or of the cgroup's
limit if lower, divided among the ranks, at least RANK_MEMORY_MIN_BYTES), ``off``, or a size: bytes
or ``K``/``M``/``G``/``T`` with an optional ``iB``/``B`` (all binary: ``8G`` = ``8GiB`` = 8 x 2**30).
The config keeps the words (``auto``), so a recording is the same on every machine; what ``auto``
comes to is the machine's.
"""

from __future__ import annotations

import os
import re

from timetravel.sim.scenario import ConfigError

MACHINE_MEMORY_SHARE = 0.75
"""The part of the machine's memory that ``auto`` divides among the ranks (the rest: the coordinator,
the zygote, the page cache and whatever else the machine runs)."""
RANK_MEMORY_MIN_BYTES = 1 << 30
"""The least ``auto`` gives a rank: torch alone takes about 0.3 GiB of a rank's data segment."""
CGROUP_MEMORY_MAX = "/sys/fs/cgroup/memory.max"
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?\s*$", re.IGNORECASE)


def check_memory_setting(text: str) -> None:
    """Raise ConfigError unless ``text`` is a valid ``rank_memory_max`` (one line naming it)."""
    rank_memory_bytes(text, 1)


def rank_memory_bytes(text: str, ranks: int) -> int | None:
    """What ``rank_memory_max`` comes to for each of ``ranks`` ranks here (None: no limit)."""
    word = text.strip().lower()
    if word == "off":
        return None
    if word == "auto":
        share = int(machine_memory_bytes() * MACHINE_MEMORY_SHARE) // max(ranks, 1)
        return max(share, RANK_MEMORY_MIN_BYTES)
    match = _SIZE.match(text)
    if match is None:
        raise ConfigError(
            f"config key 'rank_memory_max': {text!r} is not auto, off or a size (8GiB, 512M, 1073741824)"
        )
    value = int(float(match.group(1)) * _UNITS[match.group(2).upper()])
    if value <= 0:
        raise ConfigError(f"config key 'rank_memory_max': {text!r} is not a positive size")
    return value


def machine_memory_bytes() -> int:
    """The machine's physical memory, or its cgroup's limit when that is lower."""
    total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    try:
        with open(CGROUP_MEMORY_MAX, encoding="ascii") as limit:
            text = limit.read().strip()
    except OSError:
        return total
    return min(total, int(text)) if text.isdigit() else total
