"""BranchTree (outcomes, picking two, compare) and CompareView (outcomes, divergence, paths, curves)."""

from __future__ import annotations

from textual.widgets import DataTable

from tests.tui import sample
from tests.tui.harness import Harness, drive, widget_lines
from timetravel.tui.widgets.branch_tree import BranchTree
from timetravel.tui.widgets.compare import CompareView, has_alarm
from timetravel.tui.widgets.loss_plot import LossPlot


def run_tree(scenario, size=(80, 12)) -> None:
    tree = BranchTree(sample.branches())
    app = Harness(tree)

    async def wrapped(pilot) -> None:
        tree.focus()
        await pilot.pause()
        await scenario(pilot, app, tree)

    drive(app, wrapped, size)


def labels(tree: BranchTree) -> list[str]:
    return [str(tree.get_node_at_line(line).label) for line in range(tree.last_line + 1)]


def test_branches_hang_under_their_parent_with_fork_time_outcome_and_change() -> None:
    async def scenario(pilot, app, tree: BranchTree) -> None:
        assert labels(tree) == [
            "main ✖ fail nan on rank5 @1040ms",
            "b1 @950ms ✔ pass · drop f3",
            "b3 @1100ms … running 40%",
            "b2 @950ms ✖ fail nan on rank5 · branch-seed 2",
        ]
        assert tree.get_node_at_line(2).parent.data == "b1"

    run_tree(scenario)


def test_pick_two_with_space_and_compare_with_c() -> None:
    async def scenario(pilot, app, tree: BranchTree) -> None:
        await pilot.press("space", "down", "space")
        assert tree.picked == ("main", "b1")
        assert labels(tree)[0].startswith("[1] main") and labels(tree)[1].startswith("[2] b1")
        await pilot.press("down", "space")
        assert tree.picked == ("b1", "b3")  # a third pick replaces the oldest
        await pilot.press("c")
        request = app.posted(BranchTree.CompareRequested)[-1]
        assert (request.a, request.b) == ("b1", "b3")
        await pilot.press("enter")
        assert app.posted(BranchTree.BranchChosen)[-1].name == "b3"

    run_tree(scenario)


def test_compare_with_one_pick_compares_it_against_main() -> None:
    async def scenario(pilot, app, tree: BranchTree) -> None:
        await pilot.press("down", "c")
        request = app.posted(BranchTree.CompareRequested)[-1]
        assert (request.a, request.b) == ("main", "b1")

    run_tree(scenario)


def run_compare(scenario, size=(80, 24)) -> None:
    view = CompareView(sample.compare_data())
    app = Harness(view)

    async def wrapped(pilot) -> None:
        view.query_one(DataTable).focus()
        await pilot.pause()
        await scenario(pilot, app, view)

    drive(app, wrapped, size)


def test_compare_header_names_both_outcomes_and_the_first_divergence() -> None:
    async def scenario(pilot, app, view: CompareView) -> None:
        lines = view.header_text().plain.split("\n")
        assert lines[0].startswith("a main     ✖ fail  nan on rank5 @1040ms")
        assert lines[1].startswith("b b1       ✔ pass  (drop f3)")
        assert lines[2] == "first divergence 972ms: fault on rank5 (a #48212, b no such event)"
        assert lines[3].startswith("at 972ms: 3 paths differ")

    run_compare(scenario)


def test_compare_header_names_the_completing_event_when_the_divergence_is_a_collectives_completion() -> None:
    """A torch divergence is dated at the collective's completion; the event that completed it came
    earlier, and the header says so as `compare` does (it read as if the event were at t_done)."""
    import dataclasses

    from timetravel.tui.model import Divergence

    data = dataclasses.replace(
        sample.compare_data(), first_divergence=Divergence(1_190_678, "c10d", "call", 107, 107, 1_177_070)
    )
    view = CompareView(data)
    lines: list[str] = []

    async def scenario(pilot) -> None:
        await pilot.pause()
        lines.extend(view.header_text().plain.split("\n"))

    drive(Harness(view), scenario, (80, 24))
    assert lines[2] == "first divergence 1.190678ms: completed by call on c10d at 1.17707ms (a #107, b #107)"


def test_differing_paths_are_rows_and_enter_opens_one() -> None:
    async def scenario(pilot, app, view: CompareView) -> None:
        table = view.query_one(DataTable)
        assert table.row_count == 3
        assert [str(table.get_row_at(index)[0]) for index in range(3)] == [
            "nodes/rank5/grad",
            "nodes/rank5/weights",
            "nodes/rank5/step",
        ]
        assert [has_alarm(str(table.get_row_at(index)[1])) for index in range(3)] == [False, True, False]
        await pilot.press("down", "enter")
        chosen = app.posted(CompareView.PathChosen)[-1]
        assert (chosen.path, chosen.a, chosen.b, chosen.at_ns) == (
            "nodes/rank5/weights",
            "main",
            "b1",
            sample.FAULT_NS,
        )

    run_compare(scenario)


def test_both_loss_curves_share_one_plot_and_split_where_a_goes_nan() -> None:
    async def scenario(pilot, app, view: CompareView) -> None:
        plot = view.query_one(LossPlot)
        values_a, _values_b = plot.columns()
        lines = widget_lines(plot)
        top = lines[0]
        last_column = len(values_a) - 1
        # run a's last loss is NaN: drawn at the top; run b's is finite and low
        assert top[-1] == "●"
        assert values_a[last_column] != values_a[last_column]  # NaN
        assert "◉" in "".join(lines)  # the two runs agree before the fault
        assert "○" in "".join(lines[1:])

    run_compare(scenario)


def test_alarm_means_a_nan_or_inf_on_either_side() -> None:
    assert has_alarm("64/64 elements differ, NaN 0 -> 64")
    assert has_alarm("1.0 -> nan")
    assert has_alarm("Inf 2 -> 0")
    assert not has_alarm("64/64 elements differ, max abs 0.5, NaN 0 -> 0")
    assert not has_alarm("97 -> 98")
