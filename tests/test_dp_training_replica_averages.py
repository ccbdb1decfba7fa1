"""The one-entry memos of dp_training's replicas (``replicas.average``, ``replicas.all_finite``)
give what the functions they stand for give, call after call, whatever came before: a memo keyed
on bytes must never hand one input's answer to another, nor one rank's array to another rank."""

from __future__ import annotations

import numpy as np
import pytest

from timetravel.scenarios.dp_training import optimizer, replicas, update
from timetravel.scenarios.dp_training.numerics import all_finite


def _sums() -> list[np.ndarray]:
    random = np.random.default_rng(3)
    base = random.standard_normal(257).astype(np.float32)
    flipped = base.copy()
    flipped.view(np.uint32)[5] ^= 1 << 30
    return [base, base.copy(), flipped, base.astype(np.float64), base[:128].copy(), np.zeros(257, np.float32)]


@pytest.mark.parametrize("loss_scale", [1.0, 1, 1024.0, 3.0, 0.0, -0.0])
def test_average_matches_update_average_call_after_call(loss_scale: float) -> None:
    replicas.clear()
    results = []
    with np.errstate(divide="ignore", invalid="ignore"):
        for reduced in _sums() * 2:
            for ranks, dtype in [(10_000, "float32"), (7, "float32"), (7, "bfloat16")]:
                expected = update.average(reduced, ranks, dtype, loss_scale)
                got = replicas.average(reduced, ranks, dtype, loss_scale)
                assert got.dtype == expected.dtype and got.shape == expected.shape
                assert got.tobytes() == expected.tobytes()
                results.append(got)
    assert len({id(result) for result in results}) == len(results)


def _frozen(array: np.ndarray) -> np.ndarray:
    frozen = array.copy()
    frozen.flags.writeable = False
    return frozen


def test_average_of_one_read_only_sum_matches_update_average_call_after_call() -> None:
    """The collective level hands every rank the record's read-only sum: the memo then knows it
    by identity, and must still tell every other argument, and every other array, apart."""
    replicas.clear()
    sums = [_frozen(array) for array in _sums()]
    view = sums[0][:128]  # read-only but not owning its memory: compared by its bytes
    scales = [1.0, 1, 1024.0, 0.0, -0.0, float("nan"), 1024.0]
    with np.errstate(divide="ignore", invalid="ignore"):
        for reduced in [sums[0], sums[0], sums[2], view, sums[0], sums[3], sums[3]]:
            for loss_scale in scales:
                for ranks, dtype in [(10_000, "float32"), (10_000, "float32"), (7, "bfloat16")]:
                    expected = update.average(reduced, ranks, dtype, loss_scale)
                    got = replicas.average(reduced, ranks, dtype, loss_scale)
                    assert got.dtype == expected.dtype and got.shape == expected.shape
                    assert got.tobytes() == expected.tobytes()
                    assert got.flags.writeable
                    got[:] = 7  # a rank's own copy: the next rank's is untouched


def test_average_tells_a_negative_zero_loss_scale_from_zero() -> None:
    replicas.clear()
    reduced = _sums()[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        positive = replicas.average(reduced, 4, "float32", 0.0)
        negative = replicas.average(reduced, 4, "float32", -0.0)
        assert negative.tobytes() == update.average(reduced, 4, "float32", -0.0).tobytes()
    assert positive.tobytes() != negative.tobytes()


def test_each_rank_gets_its_own_average() -> None:
    replicas.clear()
    reduced = _sums()[0]
    first = replicas.average(reduced, 4, "float32", 1.0)
    first[:] = 0
    assert (
        replicas.average(reduced, 4, "float32", 1.0).tobytes()
        == update.average(reduced, 4, "float32").tobytes()
    )


def test_all_finite_matches_numerics_call_after_call() -> None:
    replicas.clear()
    finite = np.ones(256, np.float32)
    with_nan = finite.copy()
    with_nan[17] = np.nan
    with_inf = finite.copy()
    with_inf[0] = -np.inf
    values = [finite, with_nan, finite.copy(), with_inf, with_inf.astype(np.float64), finite[::2], with_nan]
    for array in values * 2:
        assert replicas.all_finite(array) is all_finite(array)


def test_the_memos_tell_dtypes_apart_on_the_same_bytes() -> None:
    replicas.clear()
    infinite = np.array([np.inf, 1.0], dtype=np.float32)
    same_bytes = infinite.view(np.int32)
    assert replicas.all_finite(infinite) is False
    assert replicas.all_finite(same_bytes) is True
    assert replicas.all_finite(infinite) is False
    bucket = np.array([3.0, 4.0, 0.5], dtype=np.float32)
    verdict = replicas.inspect(bucket, 10.0)
    assert replicas.inspect(bucket.view(np.int32), 10.0) == update.inspect(bucket.view(np.int32), 10.0)
    assert replicas.inspect(bucket, 10.0) == verdict == update.inspect(bucket, 10.0)


@pytest.mark.parametrize("name", ["sgd", "adam"])
def test_apply_matches_update_apply_call_after_call_with_or_without_the_buckets_bytes(name: str) -> None:
    """The pipeline hands ``apply`` the bucket's bytes it made for ``inspect``; the key built from
    them (and from the slots, arrays and numbers) must be the one built without them."""
    replicas.clear()
    random = np.random.default_rng(5)
    config = {"optimizer": name, "lr": 0.01, "momentum": 0.9, "dtype": "float32"}
    weights = random.standard_normal(16).astype(np.float32)
    buckets = [random.standard_normal(17).astype(np.float32) for _ in range(2)]
    slots = optimizer.initial_slots(name, 16)
    for step in range(6):
        bucket = buckets[step % 2]
        expected_weights, expected_slots = update.apply(weights, slots, bucket, config, False)
        given = bucket.tobytes() if step % 3 else None
        got_weights, got_slots = replicas.apply(weights, slots, bucket, config, False, given)
        assert got_weights.tobytes() == expected_weights.tobytes()
        assert list(got_slots) == list(expected_slots)
        for key, value in expected_slots.items():
            same = got_slots[key]
            assert same.tobytes() == value.tobytes() if isinstance(value, np.ndarray) else same == value
        weights, slots = got_weights, got_slots
