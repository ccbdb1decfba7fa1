"""dp_training's maths: fixed-order sums, the model's gradient, optimizers, data and canonical sums."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from timetravel.scenarios.dp_training import naive, optimizer, ring, tree
from timetravel.scenarios.dp_training.data import build_dataset
from timetravel.scenarios.dp_training.model import layout_for, local_bucket, loss_and_gradient
from timetravel.scenarios.dp_training.numerics import (
    LOOP_SLICE_ELEMENTS_MIN,
    contract,
    norm,
    sequential_sum,
    stack_rows,
)

F32 = np.float32


def test_sequential_sum_adds_left_to_right_on_both_code_paths() -> None:
    # 2**24 + 1 rounds back to 2**24 in float32, so left to right gives 0 where a pairwise or
    # reordered sum would give 1 or 2: the value tells which order was used.
    values = [2.0**24, 1.0, 1.0, -(2.0**24)]
    for width in (1, LOOP_SLICE_ELEMENTS_MIN):
        stack = np.array([[value] * width for value in values], dtype=F32)
        assert np.all(sequential_sum(stack) == F32(0.0))
    reversed_stack = np.array([[value] for value in reversed(values)], dtype=F32)
    assert sequential_sum(reversed_stack)[0] == F32(2.0)


def test_contract_equals_a_scalar_loop_in_index_order() -> None:
    generator = np.random.Generator(np.random.PCG64(3))
    for rows, inner, columns in ((3, 5, 2), (4, 7, 40)):  # small and large slices: both paths
        left = generator.random((rows, inner)).astype(F32) - F32(0.5)
        right = generator.random((inner, columns)).astype(F32) - F32(0.5)
        expected = np.zeros((rows, columns), dtype=F32)
        for row in range(rows):
            for column in range(columns):
                total = F32(left[row, 0] * right[0, column])
                for k in range(1, inner):
                    total = F32(total + F32(left[row, k] * right[k, column]))
                expected[row, column] = total
        assert np.array_equal(contract(left, right), expected)


def test_norm_is_float64_and_passes_non_finite_through() -> None:
    assert norm(np.array([3.0, 4.0], dtype=F32)) == 5.0
    assert np.isnan(norm(np.array([1.0, np.nan], dtype=F32)))
    assert norm(np.array([np.finfo(F32).max] * 4, dtype=F32)) == pytest.approx(2 * float(np.finfo(F32).max))
    assert norm(np.array([np.inf], dtype=F32)) == float("inf")


def test_layout_fits_the_requested_parameter_count() -> None:
    for params in (25, 256, 2048, 100_000):
        layout = layout_for(params)
        assert layout.hidden >= 1
        assert layout.params <= params or layout.hidden == 1
        assert layout_for(params + (layout.inputs + 1 + layout.outputs)).hidden == layout.hidden + 1
    assert layout_for(2048).params == 2041


def test_gradient_matches_central_differences() -> None:
    layout = layout_for(256)
    dataset = build_dataset(5, 1, 8, 1, layout)
    weights = dataset.initial_weights.astype(np.float64)
    inputs = dataset.inputs[0][0].astype(np.float64)
    targets = dataset.targets[0][0].astype(np.float64)

    def loss_at(flat: np.ndarray) -> float:
        w1, b1, w2, b2 = layout.split(flat)
        hidden = np.maximum(inputs @ w1 + b1, 0.0)
        return float(np.mean((hidden @ w2 + b2 - targets) ** 2))

    loss, gradient = loss_and_gradient(weights.astype(F32), inputs.astype(F32), targets.astype(F32), layout)
    assert float(loss) == pytest.approx(loss_at(weights), rel=1e-5)
    step = 1e-6
    for index in (0, 17, layout.w1_end + 3, layout.b1_end + 5, layout.params - 1):
        bumped = weights.copy()
        bumped[index] += step
        lowered = weights.copy()
        lowered[index] -= step
        numeric = (loss_at(bumped) - loss_at(lowered)) / (2 * step)
        assert float(gradient[index]) == pytest.approx(numeric, rel=1e-3, abs=1e-6)


def test_bucket_carries_the_loss_last_in_the_model_dtype() -> None:
    layout = layout_for(256)
    dataset = build_dataset(0, 2, 4, 1, layout)
    weights = dataset.initial_weights.astype(F32)
    bucket = local_bucket(weights, dataset.inputs[1][0], dataset.targets[1][0], layout, np.dtype(F32))
    loss, gradient = loss_and_gradient(weights, dataset.inputs[1][0], dataset.targets[1][0], layout)
    assert bucket.shape == (layout.params + 1,)
    assert np.array_equal(bucket[:-1], gradient) and bucket[-1] == loss


def test_dataset_is_a_function_of_data_seed_and_shards_differ() -> None:
    layout = layout_for(256)
    first = build_dataset(7, 3, 4, 2, layout)
    again = build_dataset(7, 3, 4, 2, layout)
    other = build_dataset(8, 3, 4, 2, layout)
    assert np.array_equal(first.initial_weights, again.initial_weights)
    assert all(np.array_equal(a, b) for a, b in zip(first.inputs, again.inputs, strict=True))
    assert not np.array_equal(first.initial_weights, other.initial_weights)
    assert not np.array_equal(first.inputs[0], first.inputs[1])
    assert first.inputs[0].shape == (2, 4, layout.inputs) and first.targets[2].shape == (2, 4, layout.outputs)


def test_sgd_momentum_is_pytorch_sgd_and_pure() -> None:
    weights = np.array([1.0, -2.0], dtype=F32)
    gradient = np.array([0.5, 0.25], dtype=F32)
    slots = optimizer.initial_slots("sgd", 2)
    first, slots_after = optimizer.step("sgd", weights, gradient, slots, 0.1, 0.9)
    assert np.array_equal(slots["momentum"], np.zeros(2, dtype=F32))  # the input is untouched
    assert np.array_equal(first, weights - F32(0.1) * gradient)
    second, _ = optimizer.step("sgd", first, gradient, slots_after, 0.1, 0.9)
    velocity = gradient * F32(0.9) + gradient
    assert np.array_equal(second, first - F32(0.1) * velocity)


def test_adam_first_step_moves_each_weight_by_about_lr() -> None:
    weights = np.zeros(3, dtype=F32)
    gradient = np.array([4.0, -0.01, 1e-3], dtype=F32)
    slots = optimizer.initial_slots("adam", 3)
    updated, after = optimizer.step("adam", weights, gradient, slots, 0.01, 0.0)
    # after bias correction m_hat = g and v_hat = g*g, so the step is lr * g / (|g| + eps)
    assert updated == pytest.approx([-0.01, 0.01, -0.01], rel=1e-4)
    assert after["beta1_power"] == optimizer.ADAM_BETA1 and after["beta2_power"] == optimizer.ADAM_BETA2
    assert slots["beta1_power"] == 1.0


def _stack(ranks: int, elements: int) -> np.ndarray:
    generator = np.random.Generator(np.random.PCG64(ranks))
    # magnitudes spread over decades so that the order of additions shows in the bits
    return (
        (generator.random((ranks, elements)) - 0.5) * 10.0 ** generator.integers(-3, 4, (ranks, elements))
    ).astype(F32)


def test_ring_canonical_sum_starts_each_chunk_at_its_own_rank() -> None:
    stack = _stack(5, 13)
    bounds = ring.ring_bounds(13, 5)
    expected = np.empty(13, dtype=F32)
    for chunk in range(5):
        low, high = bounds[chunk], bounds[chunk + 1]
        total = stack[chunk, low:high].copy()
        for offset in range(1, 5):
            total = total + stack[(chunk + offset) % 5, low:high]
        expected[low:high] = total
    assert np.array_equal(ring.canonical_sum(stack), expected)


@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 5, 7, 8, 11, 64, 100, 1023, 1025])
def test_tree_canonical_sum_is_own_plus_left_plus_right(ranks: int) -> None:
    """Every level's sums are added by slices (a level's parents of a left or right child are a
    prefix of it): the same additions as the definition, bit for bit, whatever the last level's
    fill (full, one short, a lone left child)."""
    stack = _stack(ranks, 9)

    def subtree(rank: int) -> np.ndarray:
        total = stack[rank].copy()
        for child in tree.children_of(rank, ranks):
            total = total + subtree(child)
        return total

    assert tree.canonical_sum(stack).tobytes() == subtree(0).tobytes()


def test_tree_depth_counts_edges_from_the_deepest_leaf() -> None:
    assert tree.depth(11) == 3 and tree.depth(8) == 3 and tree.depth(10_000) == 13


def test_naive_canonical_sum_is_rank_order() -> None:
    stack = _stack(6, 7)
    expected = stack[0].copy()
    for rank in range(1, 6):
        expected = expected + stack[rank]
    assert np.array_equal(naive.canonical_sum(stack), expected)


def test_orders_really_differ_on_these_values() -> None:
    # guards the three tests above: if every order gave the same bits they would prove nothing
    stack = _stack(11, 64)
    sums = [ring.canonical_sum(stack), tree.canonical_sum(stack), naive.canonical_sum(stack)]
    assert not np.array_equal(sums[0], sums[2]) and not np.array_equal(sums[1], sums[2])


def test_tree_chunks_respect_the_byte_bound() -> None:
    bounds = tree.chunk_bounds(2049, 4, 2048)
    sizes = [high - low for low, high in itertools.pairwise(bounds)]
    assert len(sizes) == 5 and max(sizes) * 4 <= 2048 and sum(sizes) == 2049
    assert tree.chunk_bounds(10, 4, 1 << 20) == (0, 10)


def test_stack_rows_is_np_stack() -> None:
    rng = np.random.Generator(np.random.PCG64(4))
    for shape, dtype in [((257,), np.float32), ((8, 16), np.float32), ((5,), np.float64)]:
        arrays = [rng.standard_normal(shape).astype(dtype) for _ in range(33)]
        arrays[3] = arrays[3][::-1]  # a view that is not contiguous in the same way
        stacked = stack_rows(arrays)
        expected = np.stack(arrays)
        assert stacked.dtype == expected.dtype and stacked.shape == expected.shape
        assert stacked.tobytes() == expected.tobytes()
        stacked[0, ...] = 0  # a new array, not a view of the rows
        assert arrays[0].any()
    with pytest.raises(ValueError, match="same shape"):
        stack_rows([np.zeros(4), np.zeros(5)])
    with pytest.raises(ValueError, match="same shape"):
        stack_rows([np.zeros((2, 4)), np.zeros((6,))])
