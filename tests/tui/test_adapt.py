"""adapt: explore results reshaped into widget records, nothing computed on the way."""

from __future__ import annotations

from timetravel.explore import compare_results as cr
from timetravel.explore import results as r
from timetravel.tui.adapt import branch_infos, compare_data, diff_data, likelihood_points

MS = 1_000_000
NAN_FAILURE = {"kind": "nan", "node": "rank5", "t_ns": 1040 * MS, "message": "loss", "signature": "nan:guard"}


def test_branches_become_a_tree_of_outcomes() -> None:
    result = r.BranchesResult(
        (
            r.BranchResult("main", "main", 0, "fail", NAN_FAILURE),
            r.BranchResult("b1", "main", 950 * MS, "pass", None, ("drop f3",)),
        ),
        current="b1",
    )
    main, b1 = branch_infos(result, "ms")
    assert (main.parent, main.at_ns, main.outcome, main.failure) == (
        None,
        None,
        "fail",
        "nan on rank5 @1040ms",
    )
    assert (b1.parent, b1.at_ns, b1.outcome, b1.changes) == ("main", 950 * MS, "pass", "drop f3")


def test_likelihood_is_a_rate_per_snapshot_time() -> None:
    points = (r.FanoutResult(900 * MS, 10, 0.1, {}), r.FanoutResult(1000 * MS, 10, 1.0, {}))
    result = r.LikelihoodResult("main", 10, points, 1000 * MS)
    assert likelihood_points(result) == ((900 * MS, 0.1), (1000 * MS, 1.0))


def test_compare_and_diff_fill_one_compare_view() -> None:
    first = cr.Divergence(972 * MS, "rank5", "fault", 311_002, None, event_a=48_212, event_b=None)
    compare = cr.CompareResult(
        cr.RunSide("main", "fail", NAN_FAILURE),
        cr.RunSide("b1", "pass", None),
        first,
        metrics={"loss": {"a": [[10 * MS, 2.0], [20 * MS, 1.5]], "b": [[10 * MS, 2.0]]}},
    )
    diff = cr.DiffCommandResult(
        "main",
        "b1",
        972 * MS,
        (cr.DiffEntry("nodes/rank5/grad", "changed", "1/64 elements differ"),),
        3,
        first,
    )
    data = compare_data(compare, diff, "ms", {"b1": "drop f3"})
    assert (data.a.name, data.a.outcome, data.b.changes) == ("main", "fail", "drop f3")
    assert (
        data.at_ns == 972 * MS
        and data.first_divergence is not None
        and data.first_divergence.event_a == 48_212
        and data.first_divergence.event_b is None
    )
    assert [entry.path for entry in data.entries] == ["nodes/rank5/grad", "…"]
    assert data.entries[-1].summary == "3 more paths differ"
    assert data.loss_a == ((10 * MS, 2.0), (20 * MS, 1.5)) and data.loss_b == ((10 * MS, 2.0),)


def test_diff_alone_fills_the_loss_plot_and_compare_alone_fills_the_paths() -> None:
    """Issue 15: after `diff` alone the loss pane said `no loss metric in these runs`, and a compare
    without a diff listed no paths."""
    loss = {"loss": {"a": [[10 * MS, 2.0]], "b": [[10 * MS, 1.0]]}}
    diff = cr.DiffCommandResult(
        "main", "b1", 972 * MS, (cr.DiffEntry("faults/f2", "removed", "only in a"),), 0, None, loss, "--at"
    )
    data = diff_data(diff, (), "ms")
    assert data.loss_a == ((10 * MS, 2.0),) and data.loss_b == ((10 * MS, 1.0),)
    compare = cr.CompareResult(
        cr.RunSide("main", "fail", NAN_FAILURE), cr.RunSide("b1", "pass", None), None, loss, diff
    )
    assert [entry.path for entry in compare_data(compare, None, "ms").entries] == ["faults/f2"]
