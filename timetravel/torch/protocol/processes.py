"""The machine's processes as both sides see them: who is whose child, and in which session.

A run's processes are its rank processes and whatever those start. Each rank leads a session of its
own (rank/main.py), so the coordinator ends a rank and every process it started by the rank's
session id (world/driver.py); the zygote, a child subreaper that adopts every orphan below it, ends
all of its descendants when it ends (rank/zygote.py). Both read the same table: ``/proc/N/stat`` on
Linux. Elsewhere the table is empty and only the rank's process group is killed (docs/torch.md).
"""

from __future__ import annotations

import os
from typing import NamedTuple

PROC = "/proc"


class ProcessRow(NamedTuple):
    pid: int
    ppid: int
    sid: int
    state: str
    """The kernel's one-letter state: ``Z`` (a zombie) and ``X`` (dead) are already gone."""
    name: str
    """The executable's short name (``comm``: at most 15 characters)."""

    @property
    def gone(self) -> bool:
        return self.state in ("Z", "X")


def process_table() -> list[ProcessRow]:
    """Every process of the machine now (empty where there is no ``/proc``). A process that ends
    while the table is read is left out."""
    try:
        entries = os.listdir(PROC)
    except OSError:
        return []
    rows = []
    for entry in entries:
        if entry.isdigit():
            row = read_row(int(entry))
            if row is not None:
                rows.append(row)
    return rows


def read_row(pid: int) -> ProcessRow | None:
    """One process's row, or None when it has ended (or cannot be read)."""
    try:
        with open(f"{PROC}/{pid}/stat", "rb") as stat:
            text = stat.read().decode("utf-8", "replace")
    except OSError:
        return None
    opening, closing = text.find("("), text.rfind(")")  # the name may hold spaces and parentheses
    fields = text[closing + 2 :].split()
    if opening < 0 or closing < opening or len(fields) < 4:
        return None
    return ProcessRow(pid, int(fields[1]), int(fields[3]), fields[0], text[opening + 1 : closing])
