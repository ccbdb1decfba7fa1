"""The structural diff: bitwise equality, typed changes, array summaries, bounded output."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from timetravel.explore.diff import (
    ADDED,
    CHANGED,
    DTYPE,
    REMOVED,
    SHAPE,
    TYPE,
    diff,
    render_tree,
    summarize_arrays,
)


def test_equal_values_give_an_empty_diff() -> None:
    value = {"a": [1, 2.5, "x", None, b"\x00"], "b": {"c": np.arange(6, dtype=np.float32).reshape(2, 3)}}
    twin = {"a": [1, 2.5, "x", None, b"\x00"], "b": {"c": np.arange(6, dtype=np.float32).reshape(2, 3)}}
    result = diff(value, twin)
    assert result.equal
    assert result.total == 0


def test_dicts_by_key_lists_by_index_in_walk_order() -> None:
    a = {"x": 1, "gone": True, "list": [1, 2, 3], "nested": {"deep": "old"}}
    b = {"x": 2, "list": [1, 5], "nested": {"deep": "new"}, "new": 7}
    result = diff(a, b)
    assert [(c.path, c.change) for c in result.changes] == [
        ("x", CHANGED),
        ("gone", REMOVED),
        ("list/1", CHANGED),
        ("list/2", REMOVED),
        ("nested/deep", CHANGED),
        ("new", ADDED),
    ]
    assert result.changes[0].summary == "1 -> 2 (+1)"
    assert result.changes[0].detail == {"a": 1, "b": 2, "delta": 1}


def test_type_changes_are_reported_once_without_descending() -> None:
    result = diff({"v": {"k": 1}}, {"v": [1]})
    assert [(c.path, c.change) for c in result.changes] == [("v", TYPE)]
    assert result.changes[0].detail == {"a_type": "dict", "b_type": "list"}
    assert diff(True, 1).changes[0].change == TYPE
    assert diff(1, 1.0).changes[0].change == TYPE


def test_float_equality_is_bitwise() -> None:
    assert diff(float("nan"), float("nan")).equal
    signed_zero = diff(0.0, -0.0)
    assert signed_zero.changes[0].change == CHANGED
    one_ulp = diff(1.0, math.nextafter(1.0, 2.0))
    assert one_ulp.changes[0].detail["ulp"] == 1


def test_array_summary_counts_first_index_abs_ulp_and_nonfinite() -> None:
    a = np.arange(8, dtype=np.float32)
    b = a.copy()
    b[3] = np.nextafter(a[3], np.float32(np.inf))
    b[5] = a[5] + np.float32(2.0)
    b[6] = np.nan
    summary = summarize_arrays(a, b)
    assert summary.differing == 3
    assert summary.first_index == (3,)
    assert summary.max_abs == 2.0
    # 5.0 -> 7.0 in float32: both in [4, 8) where one ulp is 2**-21, so 2.0 is 2**22 ulps.
    assert summary.max_ulp == 2**22
    assert (summary.nan_a, summary.nan_b, summary.inf_a, summary.inf_b) == (0, 1, 0, 0)
    change = diff({"w": a}, {"w": b}).changes[0]
    assert change.path == "w"
    assert change.summary.startswith(
        "3/8 elements differ: [3] 3.0 -> 3.000000238418579 (bit 0); [5] 5.0 -> 7.0"
    )
    assert "max abs 2" in change.summary
    assert "NaN 0 -> 1" in change.summary


def test_first_index_is_multidimensional() -> None:
    a = np.zeros((3, 4), dtype=np.float64)
    b = a.copy()
    b[2, 1] = 1.0
    b[1, 3] = -1.0
    assert summarize_arrays(a, b).first_index == (1, 3)


def test_ulp_distance_across_zero_and_exact_for_float64() -> None:
    tiny = np.array([5e-324])
    assert summarize_arrays(-tiny, tiny).max_ulp == 2
    one = np.array([1.0])
    bits_of_one = int(one.view(np.uint64)[0])
    assert summarize_arrays(one, -one).max_ulp == 2 * bits_of_one


def test_bfloat16_and_complex_and_int_arrays() -> None:
    bf16 = np.dtype(ml_dtypes.bfloat16)
    a = np.array([1.0, 2.0, 3.0], dtype=bf16)
    b = a.copy()
    b[1] = np.array(
        2.03125, dtype=bf16
    )  # 7 mantissa bits: in [2, 4) one ulp is 2/128, so 2 + 4/128 is 2 ulps
    summary = summarize_arrays(a, b)
    assert (summary.differing, summary.max_ulp, summary.first_index) == (1, 2, (1,))
    complex_a = np.array([1 + 1j, 2 + 2j], dtype=np.complex64)
    complex_b = complex_a.copy()
    complex_b[1] = 2 + 5j
    assert summarize_arrays(complex_a, complex_b).differing == 1
    assert summarize_arrays(complex_a, complex_b).max_abs == 3.0
    ints = summarize_arrays(np.array([0, 10, -5], dtype=np.int8), np.array([0, -10, 100], dtype=np.int8))
    assert (ints.differing, ints.max_abs, ints.max_ulp) == (2, 105, None)


def test_shape_and_dtype_changes() -> None:
    shape = diff(np.zeros(3, dtype=np.float32), np.zeros(4, dtype=np.float32)).changes[0]
    assert (shape.change, shape.detail["a_shape"], shape.detail["b_shape"]) == (SHAPE, [3], [4])
    dtype = diff(np.zeros(3, dtype=np.float32), np.zeros(3, dtype=np.float64)).changes[0]
    assert (dtype.change, dtype.detail["a_dtype"], dtype.detail["b_dtype"]) == (DTYPE, "float32", "float64")


def test_output_is_bounded_but_counts_everything() -> None:
    a = {f"n{i}": i for i in range(100)}
    b = {f"n{i}": i + 1 for i in range(100)}
    result = diff(a, b, changes_max=5)
    assert [c.path for c in result.changes] == ["n0", "n1", "n2", "n3", "n4"]
    assert result.omitted == 95
    assert result.total == 100
    with pytest.raises(ValueError):
        diff(a, b, changes_max=-1)


def test_render_tree_shares_prefixes() -> None:
    a = {"nodes": {"r0": {"step": 1, "loss": 0.5}, "r1": {"step": 1}}}
    b = {"nodes": {"r0": {"step": 2, "loss": 0.25}, "r1": {"step": 3}}}
    lines = render_tree(diff(a, b, changes_max=2))
    assert lines == [
        "nodes/",
        "  r0/",
        "    step: changed 1 -> 2 (+1)",
        "    loss: changed 0.5 -> 0.25 (abs 0.25, 4503599627370496 ulp)",
        "... and 1 more changes",
    ]


def test_diff_is_deterministic_on_equal_inputs() -> None:
    a = {"k": [np.arange(1000, dtype=np.float32), {"z": 1, "a": 2}]}
    b = {"k": [np.arange(1000, dtype=np.float32)[::-1].copy(), {"z": 2, "a": 2}]}
    assert diff(a, b).to_data() == diff(a, b).to_data()


def test_array_diff_names_the_flipped_element_of_a_mostly_equal_array() -> None:
    """Issue 15: a one-bit flip in a 2042-element array names its index, old and new value and bit."""
    a = np.zeros(2042, dtype=np.float32)
    b = a.copy()
    b.view(np.uint32)[1234] ^= np.uint32(1 << 30)
    change = diff({"g": a}, {"g": b}).changes[0]
    assert change.summary.startswith("1/2042 elements differ: [1234] 0.0 -> 2.0 (bit 30)")
    assert change.detail["elements"] == [{"index": [1234], "a": 0.0, "b": 2.0, "bits": [30]}]


def test_array_against_none_names_its_nonzero_elements() -> None:
    mask = np.zeros(2042, dtype=np.uint16)
    mask[362] = 1 << 13
    change = diff({"p": mask}, {"p": None}).changes[0]
    assert "1 nonzero: [362] bit 13" in change.summary


def test_records_with_ids_are_matched_by_id_so_a_dropped_record_is_one_change() -> None:
    faults = [{"id": f"f{n}", "kind": "drop", "target": "r1", "t_start": n * 1_000_000} for n in range(1, 8)]
    edited = [dict(fault) for fault in faults if fault["id"] != "f2"]
    edited[3]["t_start"] = 15_000_000
    result = diff({"faults": faults}, {"faults": edited})
    assert [(c.path, c.change) for c in result.changes] == [
        ("faults/f2", "removed"),
        ("faults/f5/t_start", "changed"),
    ]
    assert result.changes[0].summary == "only in a: f2 drop r1 2ms"
    assert result.changes[1].summary.startswith("5ms -> 15ms")


def test_pending_events_are_matched_by_identity_not_position() -> None:
    def event(t_ns: int, kind: str = "tick", dst: str = "a", payload: object = None) -> dict[str, object]:
        return {"t_ns": t_ns, "dst": dst, "kind": kind, "payload": payload}

    queue_a = [event(1), event(2), event(3), event(4, payload=[1])]
    queue_b = [event(2), event(3), event(4, payload=[2])]
    result = diff({"queue": queue_a}, {"queue": queue_b})
    assert [(c.path, c.change) for c in result.changes] == [
        ("queue/tick->a@0.000001ms", "removed"),
        ("queue/tick->a@0.000004ms", "removed"),
        ("queue/tick->a@0.000004ms", "added"),
    ]
