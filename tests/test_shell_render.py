"""Renderers: each result shape as a rich table, tree or line, with exact times in the display unit.

The result types here mirror the explore layer's result dataclasses field for field (the shell
finds renderers by type name), so these tests pin what a user reads for each answer.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console

from timetravel.shell.render import RenderContext, render, renderer_for
from timetravel.shell.render.plot import Series
from timetravel.shell.results import PlotResult

MS = 1_000_000
NAN_FAILURE = {
    "kind": "nan",
    "node": "rank3",
    "t_ns": 1000 * MS,
    "message": "loss is nan",
    "signature": "nan:loss",
}


def text_of(result: object, unit: str = "ms") -> str:
    console = Console(width=100, color_system=None, record=True, file=io.StringIO())
    renderable = render(result, RenderContext(unit, 100))
    assert renderable is not None
    console.print(renderable)
    return console.export_text()


@dataclass(frozen=True)
class WatchValue:
    expression: str
    value: str
    changed: bool = False


@dataclass(frozen=True)
class CursorResult:
    branch: str
    t_ns: int
    event: int
    events_total: int
    t_end_ns: int
    failure: dict[str, Any] | None
    next_event: dict[str, Any] | None = None
    watches: tuple[WatchValue, ...] = ()


@dataclass(frozen=True)
class EventRow:
    number: int
    t_ns: int
    dst: str
    kind: str
    payload: str


@dataclass(frozen=True)
class EventsResult:
    branch: str
    rows: tuple[EventRow, ...]
    cursor_event: int
    omitted: int = 0


@dataclass(frozen=True)
class ValueEntry:
    path: str
    kind: str
    summary: str
    depth: int = 0


@dataclass(frozen=True)
class PrintResult:
    branch: str
    t_ns: int
    path: str
    entries: tuple[ValueEntry, ...]
    omitted: int = 0


@dataclass(frozen=True)
class BranchResult:
    name: str
    parent: str
    at_ns: int
    outcome: str
    failure: dict[str, Any] | None
    changes: tuple[str, ...] = ()
    t_end_ns: int = 0
    events: int = 0


@dataclass(frozen=True)
class BranchesResult:
    branches: tuple[BranchResult, ...]
    current: str = "main"


@dataclass(frozen=True)
class FanoutResult:
    at_ns: int
    samples: int
    failure_rate: float
    by_signature: dict[str, int]


@dataclass(frozen=True)
class LikelihoodResult:
    branch: str
    samples: int
    points: tuple[FanoutResult, ...]
    point_of_no_return_ns: int | None


@dataclass(frozen=True)
class Divergence:
    t_ns: int
    node: str
    kind: str
    seq_a: int | None
    seq_b: int | None
    event_a: int | None = None
    event_b: int | None = None
    reason: str = ""
    changes: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True)
class RunSide:
    name: str
    outcome: str
    failure: dict[str, Any] | None
    t_end_ns: int = 0


@dataclass(frozen=True)
class CompareResult:
    a: RunSide
    b: RunSide
    first_divergence: Divergence | None
    metrics: dict[str, dict[str, list[list[Any]]]] = field(default_factory=dict)


@dataclass(frozen=True)
class DiffEntry:
    path: str
    change: str
    summary: str


@dataclass(frozen=True)
class DiffCommandResult:
    a: str
    b: str
    at_ns: int
    paths: tuple[DiffEntry, ...]
    omitted: int
    first_divergence: Divergence | None


@dataclass(frozen=True)
class FaultsResult:
    branch: str
    faults: tuple[dict[str, Any], ...]


@dataclass(frozen=True)
class FindResult:
    expression: str
    branch: str
    found: bool
    t_ns: int | None = None
    event: int | None = None
    witnesses: tuple[str, ...] = ()
    replayed_events: int = 0


def test_a_cursor_is_one_line_with_the_next_event_and_the_failure() -> None:
    result = CursorResult(
        "main",
        950 * MS,
        4096,
        5000,
        1200 * MS,
        NAN_FAILURE,
        {"number": 4097, "t_ns": 950_500_000, "dst": "rank3", "kind": "grad"},
    )
    lines = text_of(result).splitlines()
    assert lines[0] == "main  950ms  event #4096 of 5000  (run ends at 1200ms)"
    assert lines[1] == "next: #4097 at 950.5ms: grad to rank3"
    assert lines[2] == "FAIL nan on rank3 at 1000ms: loss is nan  [nan:loss]"


def test_events_are_a_table_with_times_in_the_display_unit() -> None:
    rows = (EventRow(7, 1_500, "rank0", "send", "{}"), EventRow(8, 2_000, "rank1", "recv", "{'x': 1}"))
    text = text_of(EventsResult("b1", rows, 8, omitted=3), unit="us")
    assert "events on b1" in text
    assert "1.5us" in text and "2us" in text
    assert "3 more not shown" in text


def test_a_printed_subtree_nests_by_depth() -> None:
    entries = (
        ValueEntry("nodes/rank3", "dict", "3 keys", 0),
        ValueEntry("nodes/rank3/step", "int", "40", 1),
        ValueEntry("nodes/rank3/weights", "float32[4]", "nan 2, min 0.1", 1),
        ValueEntry("nodes/rank4", "dict", "3 keys", 0),
    )
    lines = text_of(PrintResult("main", 950 * MS, "nodes", entries)).splitlines()
    assert lines[0] == "nodes  on main at 950ms"
    assert lines[1].endswith("rank3  dict  3 keys")
    assert lines[2].endswith("step  int  40") and lines[2].index("step") > lines[1].index("rank3")
    assert lines[4].endswith("rank4  dict  3 keys") and lines[4].index("rank4") == lines[1].index("rank3")


def test_the_branch_tree_puts_each_branch_under_its_parent() -> None:
    branches = (
        BranchResult("main", "", 0, "fail", NAN_FAILURE),
        BranchResult("b1", "main", 950 * MS, "pass", None, ("branch-seed 1",)),
        BranchResult("b2", "b1", 990 * MS, "pass", None, ("drop f3",)),
    )
    lines = text_of(BranchesResult(branches, current="b1")).splitlines()
    assert lines[1].endswith("main  FAIL nan on rank3 at 1000ms: loss is nan  [nan:loss]")
    assert "b1 *  from main at 950ms  branch-seed 1  pass" in lines[2]
    assert "b2  from b1 at 990ms  drop f3  pass" in lines[3]
    assert lines[1].index("main") < lines[2].index("b1") < lines[3].index("b2")


def test_fanout_buckets_sort_by_count() -> None:
    text = text_of(FanoutResult(950 * MS, 20, 0.75, {"pass": 5, "nan:loss": 15}))
    assert "20 futures from 950ms: failure rate 75%" in text
    assert text.index("nan:loss") < text.index("pass")


def test_likelihood_marks_the_point_of_no_return() -> None:
    points = (FanoutResult(900 * MS, 10, 0.2, {}), FanoutResult(950 * MS, 10, 1.0, {}))
    text = text_of(LikelihoodResult("main", 10, points, 950 * MS))
    (marked,) = [
        line for line in text.splitlines() if "point of no return" in line and "950ms" in line and "%" in line
    ]
    assert "100%" in marked
    assert "point of no return: 950ms" in text


def test_compare_shows_both_outcomes_the_metrics_and_the_divergence() -> None:
    result = CompareResult(
        RunSide("main", "fail", NAN_FAILURE, 1000 * MS),
        RunSide("b1", "pass", None, 1200 * MS),
        Divergence(951 * MS, "rank3", "grad", 10, 11, 4100, 4100),
        {"loss": {"a": [[0, 2.0], [MS, math.nan]], "b": [[0, 2.0], [MS, 0.5]]}},
    )
    text = text_of(result)
    assert "FAIL nan on rank3" in text and "pass" in text
    assert "last loss" in text and "nan" in text and "0.5" in text
    assert "first divergence: 951ms on rank3, grad  (a: event #4100; b: event #4100)" in text


def test_a_diff_groups_changed_paths_as_a_tree() -> None:
    paths = (
        DiffEntry("nodes/rank3/weights", "changed", "1 of 4 differ, max ulp 1"),
        DiffEntry("nodes/rank3/step", "changed", "40 -> 41"),
        DiffEntry("faults/0", "removed", "f3 drop"),
    )
    lines = text_of(DiffCommandResult("main", "b1", 990 * MS, paths, 7, None)).splitlines()
    assert lines[0] == "main vs b1 at 990ms"
    assert [line.strip(" ─│├└") for line in lines[1:7]] == [
        "nodes",
        "rank3",
        "weights  changed  1 of 4 differ, max ulp 1",
        "step  changed  40 -> 41",
        "faults",
        "0  removed  f3 drop",
    ]
    assert lines[7] == "… and 7 more changes (narrow with --path)"


def test_faults_get_a_column_per_key_with_times_in_the_unit() -> None:
    faults = (
        {"id": "f1", "kind": "bitflip", "target": "rank3", "t_start_ns": 990 * MS},
        {"id": "f3", "kind": "drop"},
    )
    text = text_of(FaultsResult("main", faults))
    assert text.splitlines()[1].split() == ["id", "kind", "target", "t_start"]
    assert text.splitlines()[3].split() == ["f1", "bitflip", "rank3", "990ms"]
    assert "990ms" in text


def test_find_first_names_the_moment_and_the_witnesses() -> None:
    found = FindResult(
        "nonfinite(nodes/*/weights)", "main", True, 999 * MS, 4990, ("nodes/rank3/weights",), 12
    )
    lines = text_of(found).splitlines()
    assert lines[0] == "nonfinite(nodes/*/weights) first holds at 999ms (event #4990) on main"
    assert lines[1] == "for nodes/rank3/weights"
    missing = FindResult("nonfinite(nodes/*/weights)", "b1", False)
    assert text_of(missing).strip() == "nonfinite(nodes/*/weights) never holds on b1"


def test_a_plot_result_renders_the_plot_with_a_title() -> None:
    result = PlotResult("loss", (Series("main", [(0, 2.0), (MS, 1.0)]),), width=10, height=3)
    lines = text_of(result).splitlines()
    assert lines[0] == "loss"
    assert lines[1].strip().startswith("2 ┤")
    assert result.to_data()["series"][0] == {"label": "main", "points": [[0, 2.0], [MS, 1.0]]}
    assert PlotResult("loss", (Series("a", [(0, math.nan)]),)).to_data()["series"][0]["points"] == [
        [0, "nan"]
    ]


def test_a_subclass_inherits_its_base_renderer_and_unknown_types_show_their_data() -> None:
    class LateCursor(CursorResult):
        pass

    assert renderer_for(LateCursor("main", 0, 0, 0, 0, None)) is renderer_for(
        CursorResult("main", 0, 0, 0, 0, None)
    )
    assert render(None, RenderContext()) is None
    assert text_of("plain text") == "plain text\n"
