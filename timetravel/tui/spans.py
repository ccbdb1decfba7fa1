"""Kernel spans around the cursor, for the streams view, sampled by re-executing a window of events.

The fabric's GPU model keeps, per stream of a rank, only the kernel running *now*
(``state["gpu"]["streams"][name]["running"]``: name, ticket, start and end time), not a history:
history is what the recording is for. So the spans around the cursor are found by re-executing the
window ``[cursor - SPAN_EVENTS_BEFORE, cursor + SPAN_EVENTS_AFTER]`` from the snapshot before it,
on a copy restored for the purpose (the cursor does not move), and looking after each event at the
streams of the node that handled it (a handler changes only its own node's state). A kernel is
identified by ``(rank, stream, epoch, ticket)``: a new ticket on a stream means the previous kernel
ended; a crash bumps the epoch and ends everything. A timed kernel's end is known when it starts
(the completion-order choice may push it later, which a later sample sees); an open kernel (a
collective the network decides) ends when it leaves the stream, or is drawn to the window's end.

A ``race`` failure names both kernels and the buffer in its message (``fabric/race.py``); the
second kernel starts at the failure's time on the failing rank, the first is the latest kernel of
that name on the other stream that started before it. :func:`race_edges` turns that into the
``RaceEdge`` the streams view draws as the missing ordering edge.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from timetravel.explore.session import Session
from timetravel.explore.session_data import lineage
from timetravel.fabric.gpu import GPU_KEY
from timetravel.sim.choices import Overrides
from timetravel.tui.model import KernelSpan, RaceEdge

SPAN_EVENTS_BEFORE = 1_000
SPAN_EVENTS_AFTER = 1_000
"""The window re-executed around the cursor, in events (2,000 events: tens of milliseconds)."""
SPAN_LEAD_EVENTS_MAX = 100_000
"""Bound on events re-executed from the snapshot to the window's start (a snapshot is closer)."""
SPANS_MAX = 20_000
"""Bound on the spans one window yields (1,024 ranks with a few kernels each)."""
RACE_KIND = "race"
RACE_MESSAGE = re.compile(
    r"stream race on buffer '(?P<buffer>[^']*)': kernel '(?P<second>[^']*)' on stream "
    r"'(?P<second_stream>[^']*)' \w+ it with no ordering edge after kernel '(?P<first>[^']*)' "
    r"on stream '(?P<first_stream>[^']*)'"
)


@dataclass
class _Open:
    """A kernel seen running: its identity and what is known of its times."""

    rank: str
    stream: str
    epoch: int
    ticket: int
    name: str
    start_ns: int
    end_ns: int | None

    @property
    def key(self) -> str:
        return f"{self.stream}#{self.epoch}.{self.ticket}"

    def span(self, end_ns: int) -> KernelSpan:
        return KernelSpan(self.rank, self.stream, self.name, self.start_ns, end_ns, span_id=self.key)


class SpanRecorder:
    """Turns samples of each rank's running kernels into closed spans."""

    def __init__(self) -> None:
        self.running: dict[tuple[str, str], _Open] = {}
        self.spans: list[KernelSpan] = []

    def sample(self, rank: str, state: Mapping[str, Any], now_ns: int) -> None:
        """Look at ``rank``'s streams after an event at ``now_ns``."""
        gpu = state.get(GPU_KEY)
        if not isinstance(gpu, dict):
            return
        epoch = int(gpu.get("epoch", 0))
        seen: set[str] = set()
        for stream, entry in gpu.get("streams", {}).items():
            running = entry.get("running") if isinstance(entry, dict) else None
            if running is None:
                continue
            seen.add(stream)
            self._see(rank, stream, epoch, running, now_ns)
        for (open_rank, stream), kernel in list(self.running.items()):
            if open_rank == rank and (stream not in seen or kernel.epoch != epoch):
                self._close((open_rank, stream), now_ns)

    def _see(self, rank: str, stream: str, epoch: int, running: Mapping[str, Any], now_ns: int) -> None:
        slot = (rank, stream)
        ticket = int(running.get("ticket", 0))
        current = self.running.get(slot)
        if current is not None and (current.epoch, current.ticket) != (epoch, ticket):
            self._close(slot, now_ns)
            current = None
        end = running.get("end_ns")
        if current is None:
            self.running[slot] = _Open(
                rank,
                stream,
                epoch,
                ticket,
                str(running.get("name", "?")),
                int(running.get("start_ns", now_ns)),
                end,
            )
        else:
            current.end_ns = end

    def _close(self, slot: tuple[str, str], now_ns: int, *, gone: bool = True) -> None:
        """End the kernel in ``slot``: one that is ``gone`` by ``now_ns`` ended by then (a crash
        cuts a timed kernel short); one still running at the window's end ends when it will."""
        kernel = self.running.pop(slot)
        end = now_ns if kernel.end_ns is None else (min(kernel.end_ns, now_ns) if gone else kernel.end_ns)
        if len(self.spans) < SPANS_MAX:
            self.spans.append(kernel.span(max(end, kernel.start_ns)))

    def finish(self, now_ns: int) -> tuple[KernelSpan, ...]:
        """Every span, the kernels still running drawn to their known end (or to ``now_ns``)."""
        for slot in list(self.running):
            self._close(slot, now_ns, gone=False)
        return tuple(sorted(self.spans, key=lambda span: (span.t_start_ns, span.rank, span.stream)))


def _overrides_at(session: Session, events: int) -> Overrides | None:
    """The choice overrides for re-executing the session's branch from event ``events``."""
    public = getattr(session, "overrides_at", None)
    if callable(public):
        result: Overrides | None = public(events)
        return result
    return session._overrides_at(events)


def sample_spans(
    session: Session, before: int = SPAN_EVENTS_BEFORE, after: int = SPAN_EVENTS_AFTER
) -> tuple[KernelSpan, ...]:
    """The kernels running in the events around the session's cursor (the cursor does not move)."""
    cursor = session.position.events
    start = max(cursor - before, 0)
    stop = min(cursor + after, session.end.events)
    manifests, _batches, _fork = lineage(session.reader, session.branch)
    usable = [
        info
        for info in manifests
        if not info.final and info.events <= start and session.source.can_start_at(info)
    ]
    if not usable:
        return ()
    snapshot = usable[-1]
    if start - snapshot.events > SPAN_LEAD_EVENTS_MAX:
        start = snapshot.events + SPAN_LEAD_EVENTS_MAX
    world = session.restore_world(snapshot)
    simulation = session.simulation(
        world,
        overrides=_overrides_at(session, snapshot.events),
        chain=False,
        determinism=session.determinism,
    )
    if start > world.events_processed:
        simulation.run(max_events=start - world.events_processed)
    recorder = SpanRecorder()
    for name, state in world.nodes.items():
        recorder.sample(name, state, world.t_ns)
    while world.events_processed < stop and not world.failures:
        number = world.events_processed + 1
        simulation.run(max_events=1)
        if world.events_processed != number:
            break
        event = session.event(number)
        if event is not None and event.node in world.nodes:
            recorder.sample(event.node, world.nodes[event.node], world.t_ns)
    return recorder.finish(world.t_ns)


def _latest(spans: Sequence[KernelSpan], rank: str, stream: str, name: str, t_ns: int) -> KernelSpan | None:
    found = [s for s in spans if (s.rank, s.stream, s.name) == (rank, stream, name) and s.t_start_ns <= t_ns]
    return max(found, key=lambda span: span.t_start_ns) if found else None


def race_edges(failures: Iterable[Mapping[str, Any]], spans: Sequence[KernelSpan]) -> tuple[RaceEdge, ...]:
    """The race failures among ``failures`` as edges between the spans they name.

    A kernel outside the sampled window is named ``stream:kernel`` (the streams view prints that).
    """
    edges = []
    for failure in failures:
        if failure.get("kind") != RACE_KIND or not failure.get("node"):
            continue
        match = RACE_MESSAGE.search(str(failure.get("message", "")))
        if match is None:
            continue
        rank, t_ns = str(failure["node"]), int(failure.get("t_ns", 0))
        second = _latest(spans, rank, match["second_stream"], match["second"], t_ns)
        first_before = second.t_start_ns if second is not None else t_ns
        first = _latest(spans, rank, match["first_stream"], match["first"], first_before)
        edge = RaceEdge(
            rank,
            match["buffer"],
            first.key if first is not None else f"{match['first_stream']}:{match['first']}",
            second.key if second is not None else f"{match['second_stream']}:{match['second']}",
        )
        if edge not in edges:
            edges.append(edge)
    return tuple(edges)
