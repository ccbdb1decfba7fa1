"""Renderers: each result of the command language as a rich table, tree or line, times exact."""

from __future__ import annotations

import dataclasses
import io
import math

from rich.console import Console

from timetravel.explore import compare_results as cr
from timetravel.explore import results as r
from timetravel.explore.commands import render as text_render
from timetravel.explore.minimize_trials import MinimizeResult
from timetravel.shell.render import RenderContext, registered_types, render, renderer_for
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


def test_a_cursor_is_one_line_with_the_next_event_and_the_failure() -> None:
    result = r.CursorResult(
        "main",
        1000 * MS,
        4096,
        5000,
        1200 * MS,
        NAN_FAILURE,
        {"number": 4097, "t_ns": 1_000_500_000, "dst": "rank3", "kind": "grad"},
    )
    lines = text_of(result).splitlines()
    assert lines[0] == "main  1000ms  event #4096 of 5000  (run ends at 1200ms)"
    assert lines[1] == "next: #4097 at 1000.5ms: grad to rank3"
    assert lines[2] == "FAIL nan on rank3 at 1000ms: loss is nan  [nan:loss]"


def test_events_are_a_table_with_times_in_the_display_unit() -> None:
    rows = (r.EventRow(7, 1_500, "rank0", "send", "{}"), r.EventRow(8, 2_000, "rank1", "recv", "{'x': 1}"))
    text = text_of(r.EventsResult("b1", rows, 8, omitted=3), unit="us")
    assert "events on b1" in text
    assert "1.5us" in text and "2us" in text
    assert "3 more not shown" in text


def test_a_printed_subtree_nests_by_depth() -> None:
    entries = (
        r.ValueEntry("nodes/rank3", "dict", "3 keys", 0),
        r.ValueEntry("nodes/rank3/step", "int", "40", 1),
        r.ValueEntry("nodes/rank3/weights", "float32[4]", "nan 2, min 0.1", 1),
        r.ValueEntry("nodes/rank4", "dict", "3 keys", 0),
    )
    lines = text_of(r.PrintResult("main", 950 * MS, "nodes", entries)).splitlines()
    assert lines[0] == "nodes  on main at 950ms"
    assert lines[1].endswith("rank3  dict  3 keys")
    assert lines[2].endswith("step  int  40") and lines[2].index("step") > lines[1].index("rank3")
    assert lines[4].endswith("rank4  dict  3 keys") and lines[4].index("rank4") == lines[1].index("rank3")


def test_a_wildcard_print_keeps_each_matchs_whole_path() -> None:
    entries = (
        r.ValueEntry("nodes/rank0/step", "int", "40", 0),
        r.ValueEntry("nodes/rank1/step", "int", "39", 0),
    )
    lines = text_of(r.PrintResult("main", 0, "nodes/*/step", entries)).splitlines()
    assert lines[1].endswith("nodes/rank0/step  int  40")
    assert lines[2].endswith("nodes/rank1/step  int  39")
    one = text_of(r.PrintResult("main", 0, "nodes/rank0/step", entries[:1])).splitlines()
    assert one[1].endswith("── step  int  40")


def test_an_empty_watch_list_says_so_once() -> None:
    assert text_of(r.WatchResult((), message="no watches")).splitlines() == ["no watches"]
    assert text_of(r.WatchResult(())).splitlines() == ["no watches"]


def test_the_branch_tree_puts_each_branch_under_its_parent() -> None:
    branches = (
        r.BranchResult("main", "", 0, "fail", NAN_FAILURE),
        r.BranchResult("b1", "main", 950 * MS, "pass", None, ("branch-seed 1",)),
        r.BranchResult("b2", "b1", 990 * MS, "pass", None, ("drop f3",)),
    )
    lines = text_of(r.BranchesResult(branches, current="b1")).splitlines()
    assert lines[1].endswith("main  FAIL nan on rank3 at 1000ms: loss is nan  [nan:loss]")
    assert "b1 *  from main at 950ms  branch-seed 1  pass" in lines[2]
    assert "b2  from b1 at 990ms  drop f3  pass" in lines[3]
    assert lines[1].index("main") < lines[2].index("b1") < lines[3].index("b2")


def test_fanout_buckets_sort_by_count() -> None:
    text = text_of(r.FanoutResult(950 * MS, 20, 0.75, {"pass": 5, "nan:loss": 15}))
    assert "20 futures from 950ms: failure rate 75%" in text
    assert text.index("nan:loss") < text.index("pass")


def test_likelihood_marks_the_point_of_no_return() -> None:
    points = (r.FanoutResult(900 * MS, 10, 0.2, {}), r.FanoutResult(950 * MS, 10, 1.0, {}))
    text = text_of(r.LikelihoodResult("main", 10, points, 950 * MS))
    (marked,) = [
        line for line in text.splitlines() if "point of no return" in line and "950ms" in line and "%" in line
    ]
    assert "100%" in marked
    assert "point of no return: 950ms" in text


def test_compare_shows_both_outcomes_the_metrics_and_the_divergence() -> None:
    result = cr.CompareResult(
        cr.RunSide("main", "fail", NAN_FAILURE, 1000 * MS),
        cr.RunSide("b1", "pass", None, 1200 * MS),
        cr.Divergence(951 * MS, "rank3", "grad", 10, 11, 4100, 4100),
        {"loss": {"a": [[0, 2.0], [MS, math.nan]], "b": [[0, 2.0], [MS, 0.5]]}},
    )
    text = text_of(result)
    assert "FAIL nan on rank3" in text and "pass" in text
    assert "last loss" in text and "nan" in text and "0.5" in text
    assert "first divergence: 951ms on rank3, grad  (a #4100, b #4100)" in text


def test_a_diff_groups_changed_paths_as_a_tree() -> None:
    paths = (
        cr.DiffEntry("nodes/rank3/weights", "changed", "1 of 4 differ, max ulp 1"),
        cr.DiffEntry("nodes/rank3/step", "changed", "40 -> 41"),
        cr.DiffEntry("faults/0", "removed", "f3 drop"),
    )
    lines = text_of(cr.DiffCommandResult("main", "b1", 990 * MS, paths, 7, None)).splitlines()
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
    text = text_of(r.FaultsResult("main", faults))
    assert text.splitlines()[1].split() == ["id", "kind", "target", "t_start"]
    assert text.splitlines()[3].split() == ["f1", "bitflip", "rank3", "990ms"]
    assert "990ms" in text


def test_find_first_names_the_moment_and_the_witnesses() -> None:
    found = r.FindResult(
        "nonfinite(nodes/*/weights)",
        "main",
        True,
        999 * MS,
        4990,
        ("nodes/rank3/weights",),
        12,
        node="rank3",
        kind="grad",
        strategy="bisect",
        snapshots_checked=4,
    )
    lines = text_of(found).splitlines()
    assert lines[0] == "nonfinite(nodes/*/weights) first holds at 999ms (event #4990, grad -> rank3) on main"
    assert lines[1] == "for nodes/rank3/weights"
    assert lines[2] == "re-executed 12 events, checked 4 snapshots (bisect)"
    missing = r.FindResult("nonfinite(nodes/*/weights)", "b1", False, strategy="scan")
    assert text_of(missing).splitlines()[0] == "nonfinite(nodes/*/weights) never holds on b1"
    watch = r.FindResult(
        "nodes/r1/step",
        "main",
        True,
        MS,
        7,
        ("nodes/r1/step",),
        7,
        node="r1",
        kind="tick",
        strategy="last-change",
    )
    assert (
        text_of(watch).splitlines()[0] == "nodes/r1/step last changed at 1ms (event #7, tick -> r1) on main"
    )


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
    class LateCursor(r.CursorResult):
        pass

    assert renderer_for(LateCursor("main", 0, 0, 0, 0, None)) is renderer_for(
        r.CursorResult("main", 0, 0, 0, 0, None)
    )
    assert render(None, RenderContext()) is None
    assert text_of("plain text") == "plain text\n"


def test_the_cursor_shows_a_failure_only_once_the_cursor_has_reached_it() -> None:
    before = r.CursorResult("main", 950 * MS, 10, 20, 1000 * MS, NAN_FAILURE)
    assert "FAIL" not in text_of(before)
    assert "FAIL nan on rank3" in text_of(r.CursorResult("main", 1000 * MS, 20, 20, 1000 * MS, NAN_FAILURE))


def test_at_the_end_of_a_finished_branch_a_later_failure_a_hang_is_shown() -> None:
    hang = {**NAN_FAILURE, "kind": "hang", "t_ns": 600_001 * MS, "signature": "hang:torch.collective.hang"}
    at_end = r.CursorResult("main", 1 * MS, 99, 99, 1 * MS, hang)  # reported at the wait + 600 s
    assert "FAIL hang on rank3 at 600001ms" in text_of(at_end)
    assert "FAIL hang:torch.collective.hang on rank3" in "\n".join(text_render.render_text(at_end, "ms"))
    assert "FAIL" not in text_of(dataclasses.replace(at_end, event=98))  # one event before the end
    assert "FAIL" not in text_of(dataclasses.replace(at_end, in_progress=True))  # the end is not yet the end


def test_fault_params_and_both_time_conventions_are_readable() -> None:
    faults = (
        {
            "id": "f2",
            "kind": "slow",
            "target": "rank1",
            "t_start": 5 * MS,
            "t_end": 7 * MS,
            "params": {"factor": 4},
        },
        {"id": "f4", "kind": "partition", "target": "h1", "t_start_ns": 1_500_000},
    )
    lines = text_of(r.FaultsResult("b1", faults)).splitlines()
    assert lines[1].split() == ["id", "kind", "target", "t_start", "t_end", "params"]
    assert lines[3].split() == ["f2", "slow", "rank1", "5ms", "7ms", "factor=4"]
    assert lines[4].split() == ["f4", "partition", "h1", "1.5ms"]


def test_a_minimize_result_shows_before_and_after_and_what_it_wrote() -> None:
    result = MinimizeResult(
        scenario="needle",
        seed=0,
        signature="assertion:needle.total",
        config={},
        overrides={},
        pins={},
        zero_sites=(),
        failure={
            "kind": "assertion",
            "node": "n0",
            "t_ns": 3 * MS,
            "message": "total",
            "signature": "assertion:needle.total",
        },
        faults_before=102,
        faults_after=2,
        faults_kept=("f17", "f88"),
        choices_before=40,
        choices_after=0,
        runs=98,
        seconds=1.25,
        stopped_by="fixpoint",
        out="repro.ttr",
        events=203,
        start_events=192,
        start_ns=2 * MS,
        start_check="passes without the kept faults",
    )
    text = text_of(result)
    assert text.splitlines()[0] == "minimized assertion:needle.total  in 98 runs, 1.2 s (stopped by fixpoint)"
    assert "faults" in text and "102" in text and "faults kept: f17, f88" in text
    assert "FAIL assertion on n0 at 3ms: total" in text
    assert "\nwrote repro.ttr\n" in text
    assert " ".join(text.split()).endswith(
        "the repro fails after 203 events; its test starts at event #192 (2ms): passes without the kept faults"
    )
    partial = text_of(dataclasses.replace(result, stopped_by="cancelled"))
    assert "partial: stopped by cancelled; the best result so far" in " ".join(partial.split())


def test_every_result_the_language_renders_as_text_has_a_rich_renderer() -> None:
    assert set(text_render._RENDERERS) <= set(registered_types())


def test_explain_is_the_chain_failure_first_and_origin_names_the_writer() -> None:
    from timetravel.explore import explain_results as x

    chain = x.ExplainResult(
        "main",
        NAN_FAILURE,
        (
            x.ExplainLink("detector", 90, 1000 * MS, "monitor", "observe", "the detector fired (nan)"),
            x.ExplainLink(
                "fault",
                12,
                975 * MS,
                "rank3",
                "fault",
                "fault f2 (corrupt) acted",
                (x.StateChange("nodes/rank3/grad", "changed", "flipped [362] 0.0 -> 1e-19 (bit 13)"),),
            ),
            x.ExplainLink(
                "root", None, 975 * MS, "rank3", "fault record", "f2 corrupt rank3: a fault record"
            ),
        ),
    )
    lines = [line.rstrip() for line in text_of(chain).splitlines()]
    assert lines[0].startswith("explain main: FAIL nan on rank3 at 1000ms")
    assert lines[1:] == [
        "   #90 1000ms monitor observe: the detector fired (nan)",
        "<- #12 975ms rank3 fault: fault f2 (corrupt) acted",
        "     nodes/rank3/grad: flipped [362] 0.0 -> 1e-19 (bit 13)",
        "<- fault record 975ms rank3: f2 corrupt rank3: a fault record",
    ]
    written = x.OriginResult("nodes/rank3/grad", "main", 980 * MS, 12, 975 * MS, "rank3", "fault")
    assert text_of(written).startswith("nodes/rank3/grad on main at 980ms: last written by #12 at 975ms")
    assert "as the world was built" in text_of(x.OriginResult("nodes/x", "main", 0, None))
