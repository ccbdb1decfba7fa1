"""State paths with wildcards and the predicate language (parsed, never eval'd)."""

from __future__ import annotations

import numpy as np
import pytest

from timetravel.explore.paths import PathError, completions, get, parse_path, select, world_tree
from timetravel.explore.predicates import parse_predicate
from timetravel.scenarios import get_scenario
from timetravel.sim.runner import build_world


def tree() -> dict:
    return {
        "t_ns": 950_000_000,
        "nodes": {
            "r0": {"step": 3, "w": np.ones(4, dtype=np.float32), "state": "ok"},
            "r1": {"step": 5, "w": np.array([1, np.nan, 1, 1], dtype=np.float32), "state": "ok"},
            "r2": {"step": 4, "w": np.ones(4, dtype=np.float32), "state": "slow"},
        },
        "faults": [{"id": "f1", "kind": "drop"}, {"id": "f2", "kind": "restart"}],
    }


def test_parse_path_normalizes_and_rejects_bad_segments() -> None:
    assert str(parse_path("/nodes/*/w/")) == "nodes/*/w"
    assert parse_path("").segments == ()
    assert parse_path("nodes/*/w").has_wildcard
    for bad in ("nodes/a*b", "nodes//w", "nodes/a b", "x/" * 40):
        with pytest.raises(PathError):
            parse_path(bad)


def test_select_wildcards_in_stable_order() -> None:
    found = select(tree(), "nodes/*/step")
    assert found == [("nodes/r0/step", 3), ("nodes/r1/step", 5), ("nodes/r2/step", 4)]
    assert select(tree(), "faults/*/id") == [("faults/0/id", "f1"), ("faults/1/id", "f2")]
    assert select(tree(), "faults/-1/kind") == [("faults/-1/kind", "restart")]
    assert select(tree(), "nodes/r9/step") == []
    assert float(get(tree(), "nodes/r1/w/2")) == 1.0
    with pytest.raises(PathError, match="names nothing"):
        get(tree(), "nodes/r9")
    with pytest.raises(PathError, match="wildcard"):
        get(tree(), "nodes/*")


def test_world_tree_of_a_real_world() -> None:
    scenario = get_scenario("needle")
    world = build_world(scenario, scenario.resolve_config({"workers": 3, "faults": "none"}), 1)
    view = world_tree(world)
    assert [path for path, _ in select(view, "nodes/*/total")] == [
        "nodes/w0/total",
        "nodes/w1/total",
        "nodes/w2/total",
    ]
    assert get(view, "queue/0/kind") == "round"
    assert "chain_batch" not in view


def test_nonfinite_and_differ_name_their_witnesses() -> None:
    assert parse_predicate("nonfinite(nodes/*/w)").evaluate(tree()).witnesses == ("nodes/r1/w",)
    differ = parse_predicate("differ(nodes/*/w)").evaluate(tree())
    assert differ.holds
    assert differ.witnesses == ("nodes/r0/w", "nodes/r1/w")
    same = tree()
    same["nodes"]["r1"]["w"] = np.ones(4, dtype=np.float32)
    assert not parse_predicate("differ(nodes/*/w)").evaluate(same).holds
    assert not parse_predicate("nonfinite(nodes/*/w)").evaluate(same).holds


def test_comparisons_hold_for_some_match() -> None:
    assert parse_predicate("nodes/*/step >= 4").evaluate(tree()).witnesses == (
        "nodes/r1/step",
        "nodes/r2/step",
    )
    assert parse_predicate("4 <= nodes/*/step").evaluate(tree()).witnesses == (
        "nodes/r1/step",
        "nodes/r2/step",
    )
    assert parse_predicate("nodes/*/state == 'slow'").evaluate(tree()).witnesses == ("nodes/r2/state",)
    assert not parse_predicate('nodes/*/state == "crashed"').evaluate(tree()).holds
    assert not parse_predicate("nodes/*/state > 3").evaluate(tree()).holds


def test_time_literals_are_nanoseconds() -> None:
    assert parse_predicate("t_ns == 950ms").evaluate(tree()).holds
    assert parse_predicate("t_ns < 1s and t_ns > 949999us").evaluate(tree()).holds
    assert not parse_predicate("t_ns >= 950000001ns").evaluate(tree()).holds


def test_boolean_operators_and_aggregates() -> None:
    assert parse_predicate("max(nodes/*/step) == 5 and min(nodes/*/step) == 3").evaluate(tree()).holds
    assert parse_predicate("sum(nodes/*/step) == 12 or exists(nope)").evaluate(tree()).holds
    assert parse_predicate("not exists(down/r1)").evaluate(tree()).holds
    assert parse_predicate("len(nodes/*) == 3 and len(faults) == 2").evaluate(tree()).holds
    assert parse_predicate("(mean(nodes/*/step) > 3.9) and norm(faults/0/id) == null").evaluate(tree()).holds


def test_changed_compares_with_the_previous_tree() -> None:
    before = tree()
    after = tree()
    after["nodes"]["r2"]["step"] = 5
    predicate = parse_predicate("changed(nodes/*/step)")
    assert predicate.uses_changed
    assert predicate.evaluate(after, before).witnesses == ("nodes/r2/step",)
    assert not predicate.evaluate(before, before).holds
    assert not predicate.evaluate(after).holds


@pytest.mark.parametrize(
    "text, message",
    [
        ("__import__('os')", "unknown function"),
        ("nonfinite(nodes", "ends too early"),
        ("nonfinite(nodes))", r"unexpected '\)'"),
        ("nodes/*/step >=", "ends too early"),
        ("max(3)", "takes a path"),
        ("and", "unexpected 'and'"),
        ("t_ns > 1.5.5ms", "cannot read|unexpected"),
        ("", "empty"),
        ("x ; y", "cannot read"),
    ],
)
def test_bad_predicates_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(PathError, match=message):
        parse_predicate(text)


def test_wildcards_on_both_sides_of_a_comparison_are_refused() -> None:
    with pytest.raises(PathError, match="one side"):
        parse_predicate("nodes/*/step == nodes/*/step").evaluate(tree())


def test_predicate_reports_its_paths() -> None:
    predicate = parse_predicate("nonfinite(nodes/*/w) or nodes/r0/step > 2")
    assert [str(path) for path in predicate.paths] == ["nodes/*/w", "nodes/r0/step"]


def test_completions_extend_by_one_segment() -> None:
    assert completions(tree(), "no") == ["nodes"]
    assert completions(tree(), "nodes/r") == ["nodes/r0", "nodes/r1", "nodes/r2"]
    assert completions(tree(), "nodes/*/s") == ["nodes/*/step", "nodes/*/state"]
    assert completions(tree(), "bad seg/") == []


def test_arrays_compare_bitwise_on_the_fast_path_as_the_diff_does() -> None:
    from timetravel.explore.diff import diff
    from timetravel.explore.paths import values_equal

    pairs = [
        (np.array([0.0]), np.array([-0.0])),  # different bits
        (np.array([np.nan]), np.array([np.nan])),  # same bits
        (np.arange(6.0).reshape(2, 3)[:, 1], np.array([1.0, 4.0])),  # a strided view
        (np.arange(3, dtype=np.float32), np.arange(3, dtype=np.float64)),  # another dtype
        (np.zeros((2, 2)), np.zeros(4)),  # another shape
    ]
    assert [values_equal(a, b) for a, b in pairs] == [diff(a, b, changes_max=0).equal for a, b in pairs]
    assert [values_equal(a, b) for a, b in pairs] == [False, True, True, False, False]
