"""Kernel spans sampled around the cursor from a recording, and the race edge from a race failure."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

from tests.fabric_example import BACKWARD_NS, UPDATE_NS
from tests.fabric_example import SCENARIO as FABRIC_EXAMPLE
from timetravel.explore.session import Session
from timetravel.tui.model import KernelSpan, RaceEdge
from timetravel.tui.spans import SpanRecorder, race_edges, sample_spans


def gpu(epoch: int, **running: tuple[str, int, int, int | None]) -> dict[str, Any]:
    """A rank's GPU state with ``stream=(name, ticket, start_ns, end_ns)`` running."""
    streams = {
        stream: {"running": {"name": name, "ticket": ticket, "start_ns": start, "end_ns": end}}
        for stream, (name, ticket, start, end) in running.items()
    }
    streams.setdefault("comm", {"running": None})
    return {"gpu": {"epoch": epoch, "streams": streams}}


def test_a_kernel_ends_when_its_stream_moves_on_or_the_rank_crashes() -> None:
    recorder = SpanRecorder()
    recorder.sample("r0", gpu(0, compute=("fwd", 1, 0, 40)), 0)
    recorder.sample("r0", gpu(0, compute=("fwd", 1, 0, 45), comm=("allreduce", 2, 30, None)), 30)
    recorder.sample("r0", gpu(0, comm=("allreduce", 2, 30, None)), 45)
    recorder.sample("r0", gpu(0, compute=("update", 3, 70, 75)), 70)  # allreduce finished by 70
    recorder.sample("r0", gpu(1), 72)  # a crash: a new epoch, nothing runs
    recorder.sample("r1", gpu(0, compute=("fwd", 1, 60, 100)), 60)
    spans = recorder.finish(80)
    assert [(s.rank, s.stream, s.name, s.t_start_ns, s.t_end_ns) for s in spans] == [
        ("r0", "compute", "fwd", 0, 45),  # its end moved to 45 (a completion-order flip)
        ("r0", "comm", "allreduce", 30, 70),  # an open kernel: gone when seen next
        ("r1", "compute", "fwd", 60, 100),  # still running: drawn to its known end
        ("r0", "compute", "update", 70, 72),  # cut short by the crash
    ]
    assert spans[1].key == "comm#0.2"


def test_spans_around_the_cursor_are_the_kernels_the_recording_ran(
    fabric_recording: tuple[Path, dict[str, Any]],
) -> None:
    path, _report = fabric_recording
    with Session.open(path, scenario=FABRIC_EXAMPLE) as session:
        session.goto("#300")
        cursor = session.position
        spans = sample_spans(session, before=300, after=300)
        assert session.position == cursor, "sampling does not move the cursor"
    ranks = {span.rank for span in spans}
    assert ranks == {f"r{index}" for index in range(8)}
    for span in spans:
        length = span.t_end_ns - span.t_start_ns
        if span.name == "backward":
            assert length >= BACKWARD_NS  # a completion-order flip only ever delays a kernel
        elif span.name == "update":
            assert length >= UPDATE_NS
        else:
            assert (span.name, span.stream) == ("allreduce", "comm")
    mine = [span for span in spans if span.rank == "r0"]
    compute = [span for span in mine if span.stream == "compute"]
    for earlier, later in itertools.pairwise(compute):
        assert earlier.t_end_ns <= later.t_start_ns, "a stream runs its kernels one after another"
    kinds = [span.name for span in sorted(mine, key=lambda span: span.t_start_ns)]
    assert "backward" in kinds and "allreduce" in kinds and "update" in kinds


def test_a_race_failure_becomes_the_edge_between_the_two_kernels_it_names(
    race_recording: tuple[Path, dict[str, Any]],
) -> None:
    path, report = race_recording
    failure = report["failure"]
    assert failure["kind"] == "race" and failure["node"] == "r0"
    assert "kernel 'allreduce' on stream 'comm' writes it" in failure["message"]
    assert "after kernel 'update' on stream 'compute' read it" in failure["message"]
    with Session.open(path, scenario=FABRIC_EXAMPLE) as session:
        session.goto("end")
        spans = sample_spans(session)
        edges = race_edges(session.failures(), spans)
    assert edges == (RaceEdge("r0", "grad", "compute#0.2", "comm#0.3"),)
    by_key = {span.key: span for span in spans if span.rank == "r0"}
    first, second = by_key["compute#0.2"], by_key["comm#0.3"]
    assert (first.name, first.t_start_ns) == ("update", failure["t_ns"])
    assert (second.name, second.t_start_ns) == ("allreduce", failure["t_ns"])


def test_a_race_outside_the_sampled_window_still_names_its_kernels() -> None:
    failure = {
        "kind": "race",
        "node": "r3",
        "t_ns": 500,
        "message": "stream race on buffer 'w': kernel 'optim' on stream 'compute' reads it with no ordering "
        "edge after kernel 'allreduce' on stream 'comm' wrote it (no record/wait ...)",
    }
    far = (KernelSpan("r3", "compute", "optim", 9_000, 9_100, span_id="compute#0.9"),)
    assert race_edges([failure, {"kind": "nan", "node": "r3"}], far) == (
        RaceEdge("r3", "w", "comm:allreduce", "compute:optim"),
    )
