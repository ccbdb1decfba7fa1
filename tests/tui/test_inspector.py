"""StateInspector: lazy expansion, array summaries with NaN alarms, paths kept across documents."""

from __future__ import annotations

import numpy as np

from tests.tui.harness import Harness, drive
from timetravel.scenarios import get_scenario
from timetravel.sim.runner import run_report
from timetravel.tui.describe import array_stats, describe
from timetravel.tui.widgets.inspector import CHILDREN_SHOWN_MAX, StateInspector


def gossip_world(nodes: int):
    scenario = get_scenario("gossip")
    _report, world = run_report(scenario, scenario.resolve_config([f"nodes={nodes}", "rumors=8"]), 7)
    return world


def run(scenario, document, size=(80, 20)) -> None:
    inspector = StateInspector(document)
    app = Harness(inspector)

    async def wrapped(pilot) -> None:
        inspector.focus()
        await pilot.pause()
        await scenario(pilot, app, inspector)

    drive(app, wrapped, size)


def test_top_level_only_until_expanded_and_children_appear_on_expansion() -> None:
    world = gossip_world(32)
    document = world.to_data()

    async def scenario(pilot, app, inspector: StateInspector) -> None:
        labels = inspector.visible_labels()
        assert labels[0] == "branch_key 0"
        assert "nodes {33}" in labels
        assert not any(label.startswith("n0 ") for label in labels)
        assert inspector.show_path("nodes/n3")
        assert inspector.cursor_path == "nodes/n3"
        labels = inspector.visible_labels()
        assert "n0 {3}" in labels and "n31 {3}" in labels
        seen = document["nodes"]["n3"]["seen"]
        assert f"seen bool[8] {int(seen.sum())} true" in labels

    run(scenario, document)


def test_an_array_with_nan_is_flagged_in_its_label_and_its_expansion_says_where() -> None:
    weights = np.array([0.5, -0.25, np.nan, 1.0, np.inf], dtype=np.float32)
    document = {"nodes": {"rank5": {"weights": weights, "step": 97}}}

    async def scenario(pilot, app, inspector: StateInspector) -> None:
        assert inspector.show_path("nodes/rank5/weights")
        labels = inspector.visible_labels()
        label = next(label for label in labels if label.startswith("weights"))
        assert label.startswith("weights f32[5] nan 1 inf 1 (first at 2) -0.25..1 mean 0.4167 ")
        assert "nonfinite at 2, 4" in labels
        assert "[0:5] 0.5 -0.25 nan 1.0 inf" in labels

    run(scenario, document)


def test_a_new_document_keeps_what_was_open_and_where_the_cursor_was() -> None:
    first = {"nodes": {"rank0": {"step": 1}, "rank1": {"step": 1}}}
    second = {"nodes": {"rank0": {"step": 2}, "rank1": {"step": 2}}}

    async def scenario(pilot, app, inspector: StateInspector) -> None:
        inspector.show_path("nodes/rank1/step")
        assert "step 1" in inspector.visible_labels()
        inspector.document = second
        await pilot.pause()
        assert inspector.cursor_path == "nodes/rank1/step"
        assert "step 2" in inspector.visible_labels()

    run(scenario, first)


def test_big_containers_are_grouped_and_any_member_is_reachable() -> None:
    count = 3 * CHILDREN_SHOWN_MAX + 10
    document = {"nodes": {f"rank{i}": {"step": i} for i in range(count)}}

    async def scenario(pilot, app, inspector: StateInspector) -> None:
        assert inspector.show_path(f"nodes/rank{count - 1}/step")
        labels = inspector.visible_labels()
        assert f"rank0 … rank{CHILDREN_SHOWN_MAX - 1} ({CHILDREN_SHOWN_MAX})" in labels
        assert f"step {count - 1}" in labels
        assert len(labels) < 2 * CHILDREN_SHOWN_MAX  # only the one group was expanded
        assert not inspector.show_path("nodes/nobody")

    run(scenario, document)


def test_enter_posts_the_path_and_highlighted_paths_are_marked() -> None:
    document = {"nodes": {"rank5": {"grad": np.zeros(4, dtype=np.float32)}, "rank6": {}}}

    async def scenario(pilot, app, inspector: StateInspector) -> None:
        inspector.highlight_paths = frozenset({"nodes/rank5/grad"})
        await pilot.pause()
        inspector.show_path("nodes/rank5", expand=True)
        await pilot.press("enter")
        assert [message.path for message in app.posted(StateInspector.PathChosen)] == ["nodes/rank5"]
        labels = inspector.visible_labels()
        assert "● nodes {2}" in labels and "● rank5 {1}" in labels and "rank6 {0}" in labels
        assert any(label.startswith("● grad f32[4]") for label in labels)

    run(scenario, document)


def test_describe_summarizes_values_without_printing_them() -> None:
    stats = array_stats(np.array([1.0, np.nan, 3.0]))
    assert (stats.minimum, stats.maximum, stats.mean, stats.nan, stats.first_nonfinite) == (
        1.0,
        3.0,
        2.0,
        1,
        1,
    )
    assert describe(float("nan")) == ("nan", "not finite")
    assert describe({"a": 1}) == ("{1}", "")
    assert describe(b"\x00\x01" * 10)[0] == "bytes[20] 0001000100010001…"
    assert describe("x" * 100)[0].endswith("…'")
