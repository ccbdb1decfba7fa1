"""Hand-written widget data shaped like the demo story: a fault at 972 ms, NaN found at 1040 ms."""

from __future__ import annotations

import math

from timetravel.tui.model import (
    BranchInfo,
    CompareData,
    DiffEntry,
    Divergence,
    KernelSpan,
    RaceEdge,
    RankCell,
    TimelineData,
    TimeMark,
)

MS = 1_000_000
US = 1_000
FAULT_NS = 972 * MS
FAILURE_NS = 1040 * MS
END_NS = 1200 * MS
BRANCH_NS = 950 * MS


def loss_points() -> tuple[tuple[int, float], ...]:
    """One loss per 10 ms step, falling, then NaN from the step after the fault is seen."""
    points = [(step * 10 * MS, 2.0 / (1 + 0.05 * step)) for step in range(104)]
    points.append((FAILURE_NS, math.nan))
    return tuple(points)


def timeline_data(likelihood: bool = True) -> TimelineData:
    marks = [TimeMark(step * 100 * MS, "snapshot") for step in range(12)]
    marks += [
        TimeMark(BRANCH_NS, "branch", "b1"),
        TimeMark(FAULT_NS, "fault", "f3 bitflip rank5"),
        TimeMark(FAILURE_NS, "failure", "nan on rank5"),
    ]
    rates = [(step * 100 * MS, 0.1) for step in range(10)] + [(980 * MS, 1.0), (1000 * MS, 1.0)]
    return TimelineData(
        0,
        END_NS,
        marks=tuple(marks),
        loss=loss_points(),
        likelihood=tuple(rates) if likelihood else (),
    )


def rank_cells(count: int = 16) -> tuple[RankCell, ...]:
    """``count`` ranks at step 97; rank5 has a NaN, rank9 is slow (2 steps and 1 collective behind)."""
    cells = []
    for index in range(count):
        state = {5: "nan", 9: "slow"}.get(index, "healthy")
        behind = 2 if index == 9 else 0
        cells.append(
            RankCell(
                f"rank{index}",
                state,
                step=97 - behind,
                collective_seq=388 - (1 if index == 9 else 0),
                last_progress_ns=1000 * MS - (50 * MS if index == 9 else 5 * MS),
                waiting_on="rank8" if index == 9 else "",
            )
        )
    return tuple(cells)


def kernel_spans(ranks: int = 4, offset_ns: int = 0) -> tuple[KernelSpan, ...]:
    """Three steps of fwd_bwd -> allreduce -> optimizer per rank; on rank2 the optimizer starts early."""
    spans = []
    for rank in range(ranks):
        for step in range(3):
            start = offset_ns + step * 1000 * US
            optimizer = start + (700 if rank == 2 else 910) * US
            spans += [
                KernelSpan(
                    f"rank{rank}", "compute", "fwd_bwd", start, start + 600 * US, (), ("grad",), f"fb{step}"
                ),
                KernelSpan(
                    f"rank{rank}",
                    "comm",
                    "allreduce",
                    start + 620 * US,
                    start + 900 * US,
                    ("grad",),
                    ("grad",),
                    f"ar{step}",
                ),
                KernelSpan(
                    f"rank{rank}",
                    "compute",
                    "optim",
                    optimizer,
                    optimizer + 80 * US,
                    ("grad",),
                    ("w",),
                    f"op{step}",
                ),
            ]
    return tuple(spans)


RACE = RaceEdge("rank2", "grad", "ar1", "op1")


def branches() -> tuple[BranchInfo, ...]:
    return (
        BranchInfo("main", outcome="fail", failure="nan on rank5 @1040ms"),
        BranchInfo("b1", "main", BRANCH_NS, "pass", changes="drop f3"),
        BranchInfo("b2", "main", BRANCH_NS, "fail", failure="nan on rank5", changes="branch-seed 2"),
        BranchInfo("b3", "b1", 1100 * MS, "running", progress=0.4),
    )


def compare_data() -> CompareData:
    entries = (
        DiffEntry("nodes/rank5/grad", "changed", "1/4096 elements differ, first at [17], max 1 ulp"),
        DiffEntry("nodes/rank5/weights", "changed", "4096/4096 elements differ, first at [0], NaN 4096 -> 0"),
        DiffEntry("nodes/rank5/step", "changed", "97 -> 98"),
    )
    fail_curve = loss_points()
    pass_curve = tuple((t, value) for t, value in fail_curve if math.isfinite(value))
    pass_curve += ((FAILURE_NS, 2.0 / (1 + 0.05 * 104)),)
    return CompareData(
        a=branches()[0],
        b=branches()[1],
        at_ns=FAULT_NS,
        first_divergence=Divergence(FAULT_NS, "rank5", "fault", 48_212, None),
        entries=entries,
        loss_a=fail_curve,
        loss_b=pass_curve,
    )


def world_document() -> dict:
    """A small world as plain data: 16 ranks, rank5's weights hold a NaN."""
    import numpy as np

    nodes = {}
    for cell in rank_cells():
        weights = np.linspace(-0.5, 0.5, 64, dtype=np.float32)
        if cell.name == "rank5":
            weights[17] = np.nan
        nodes[cell.name] = {"step": cell.step, "collective_seq": cell.collective_seq, "weights": weights}
    return {
        "t_ns": 1000 * MS,
        "nodes": nodes,
        "faults": [{"id": "f3", "kind": "bitflip", "target": "rank5", "t_start": FAULT_NS}],
        "failures": [],
    }


def cursor_view(events=None):
    from timetravel.tui.model import CursorView

    return CursorView(
        title="dp_training seed 17",
        unit="ms",
        cursor_ns=1000 * MS,
        timeline=timeline_data(),
        ranks=rank_cells(),
        spans=kernel_spans(offset_ns=998 * MS),
        races=(RACE,),
        events=events,
        document=world_document(),
        branches=branches(),
        branch="main",
        event_number=48_800,
        status="✖ nan on rank5 @1040ms",
    )
