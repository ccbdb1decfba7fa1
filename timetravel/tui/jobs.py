"""The debugger's unit of engine work: a :class:`Job`, and :func:`run_job`, which does one on a
worker thread.

A job is data the App's queue holds (what to run, its label in the status line, whether it is
long, its stop flag); running it touches only the :class:`~timetravel.tui.engine.Engine`, never
the screen, so it is safe off the UI thread.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from timetravel.tui.engine import Engine

CURSOR_KINDS = ("seek",)
"""Job kinds that move the cursor (refused or failed ones put the cursor back where it was)."""


@dataclass
class Job:
    """One piece of engine work. ``kind``: command, seek, compare, diff, view or streams."""

    kind: str
    args: tuple[Any, ...] = ()
    label: str = ""
    long: bool = False
    stop: threading.Event = field(default_factory=threading.Event)


def run_job(engine: Engine, job: Job, progress: Callable[[Any], None] | None) -> Any:
    """Do ``job`` (on the worker thread): a command's Outcome, a view, or the spans around it."""
    stop = job.stop.is_set
    if job.kind in ("command", "seek"):
        return engine.execute(job.args[0], progress, stop)
    if job.kind == "compare":
        a, b = job.args
        return engine.compare(a, b, progress, stop)
    if job.kind == "diff":
        a, b, path, at_ns = job.args
        return engine.open_diff(a, b, path, at_ns, progress, stop)
    if job.kind == "streams":
        return engine.streams()
    if job.kind == "opening":
        return engine.open_at_failure()
    if job.kind == "follow":
        return engine.follow()
    return engine.view()
